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
  void get(std::string path, Handler h) { routes_.push_back({"GET", std::move(path), false, std::move(h)}); }
  void post(std::string path, Handler h) { routes_.push_back({"POST", std::move(path), false, std::move(h)}); }
  // GET of `prefix` followed by at least one character; the rest is given as Request::path_param.
  void get_prefix(std::string prefix, Handler h) { routes_.push_back({"GET", std::move(prefix), true, std::move(h)}); }

  // Runs the route for the request (HEAD as GET) and returns true, or returns false when none matches.
  bool dispatch(Request& req, Response& res) const {
    const std::string& method = req.method == "HEAD" ? std::string("GET") : req.method;
    for (const Route& r : routes_) {
      if (r.method != method) continue;
      if (!r.prefix && req.path == r.path) {
        r.handler(req, res);
        return true;
      }
      if (r.prefix && req.path.size() > r.path.size() && req.path.compare(0, r.path.size(), r.path) == 0) {
        req.path_param = req.path.substr(r.path.size());
        r.handler(req, res);
        return true;
      }
    }
    return false;
  }

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix;
    Handler handler;
  };
  std::vector<Route> routes_;
};

}  // namespace qvl::server::http
