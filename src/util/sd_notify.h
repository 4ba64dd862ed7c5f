// systemd's readiness protocol without libsystemd: a datagram to $NOTIFY_SOCKET ("READY=1", "STOPPING=1",
// "STATUS=..."), which a Type=notify service unit waits for. Nothing happens when the variable is unset.
#pragma once

#include <string>

#include "util/status.h"

namespace qvl {

// Sends `state` (newline-separated KEY=VALUE assignments) to the socket $NOTIFY_SOCKET names: a path, or
// an abstract socket written "@name". Ok and nothing sent when the variable is unset or empty.
Status sd_notify(const std::string& state);

}  // namespace qvl
