// The route table of the HTTP server: (method, exact path or path prefix) -> handler.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/http/request.h"

namespace qvl::server::http {

using Handler = std::function<void(const Request&, Response&)>;

class Router {
 public:
  void get(std::string path, Handler h) { routes_.push_back({"GET", std::move(path), false, false, std::move(h)}); }
  void post(std::string path, Handler h) { routes_.push_back({"POST", std::move(path), false, false, std::move(h)}); }
  // GET of `prefix` followed by at least one character; the rest is given as Request::path_param, its "%2F" and
  // "%25" decoded (decode_segment).
  void get_prefix(std::string prefix, Handler h) {
    routes_.push_back({"GET", std::move(prefix), true, false, std::move(h)});
  }
  void del(std::string path, Handler h) { routes_.push_back({"DELETE", std::move(path), false, false, std::move(h)}); }
  // DELETE of `prefix` followed by one path segment (no '/': DELETE /v1/responses/{id} is not a route for
  // /v1/responses/{id}/input_items), given as path_param as above.
  void del_segment(std::string prefix, Handler h) {
    routes_.push_back({"DELETE", std::move(prefix), true, true, std::move(h)});
  }

  // The methods some route takes at `path` ("GET, HEAD" for GET routes), comma-separated for an Allow header;
  // empty when no route has the path. For a 405 after dispatch() found none for the request's method.
  std::string methods(const std::string& path) const {
    std::string allow;
    for (const char* m : {"GET", "POST", "DELETE"}) {
      bool any = false;
      for (const Route& r : routes_)
        any = any || (r.method == m && r.matches(path));
      if (!any) continue;
      allow += allow.empty() ? "" : ", ";
      allow += std::string(m) == "GET" ? "GET, HEAD" : m;
    }
    return allow;
  }

  // Runs the route for the request (HEAD as GET) and returns true, or returns false when none matches.
  bool dispatch(Request& req, Response& res) const {
    const std::string& method = req.method == "HEAD" ? std::string("GET") : req.method;
    for (const Route& r : routes_) {
      if (r.method != method) continue;
      if (!r.matches(req.path)) continue;
      if (r.prefix) req.path_param = decode_segment(std::string_view(req.path).substr(r.path.size()));
      r.handler(req, res);
      return true;
    }
    return false;
  }

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix;
    bool one_segment;  // prefix: the rest holds no '/'
    Handler handler;
    // The path itself, or (prefix) the path followed by at least one character (one segment).
    bool matches(const std::string& p) const {
      if (!prefix) return p == path;
      return p.size() > path.size() && p.compare(0, path.size(), path) == 0 &&
             (!one_segment || p.find('/', path.size()) == std::string::npos);
    }
  };
  std::vector<Route> routes_;
};

}  // namespace qvl::server::http
