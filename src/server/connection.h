// Tells whether the client of a request is still connected, so that a request whose client went away is
// cancelled at once, streaming or not (cpp-httplib does not expose the socket to handlers).
#pragma once

#include <string>

namespace qvl::server {

class ConnectionWatch {
 public:
  ConnectionWatch() = default;
  // Finds the socket of the connection between local_port and remote_addr:remote_port (Linux: by scanning
  // this process's descriptors; cheap, once per request). Not found: alive() is always true.
  ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port);

  // False once the peer has closed or reset the connection. Never blocks.
  bool alive() const;

 private:
  int fd_ = -1;
};

}  // namespace qvl::server
