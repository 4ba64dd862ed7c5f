// Tells whether the client of a request is still connected, so that a request whose client went away is
// cancelled at once, streaming or not (cpp-httplib does not expose the socket to handlers).
#include "server/connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace qvl::server {

namespace {

// Address and port of a socket end, formatted as cpp-httplib formats Request::remote_addr.
bool endpoint(int fd, bool peer, std::string& host, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return false;
  if (addr.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  char buf[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) {
    return false;
  }
  host = buf;
  return true;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    std::string host;
    int port = -1;
    if (!endpoint(static_cast<int>(fd), /*peer=*/false, host, port) || port != local_port) continue;
    if (!endpoint(static_cast<int>(fd), /*peer=*/true, host, port) || port != remote_port || host != remote_addr) {
      continue;
    }
    fd_ = static_cast<int>(fd);
    break;
  }
  closedir(dir);
}

bool ConnectionWatch::alive() const {
  if (fd_ < 0) return true;
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return true;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return false;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return true;
}

}  // namespace qvl::server
