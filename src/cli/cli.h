// The subcommands of the qvl binary and the small argument-parsing helpers they share.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace qvl::cli {

using Args = std::vector<std::string>;

int cmd_tokenize(const Args& args);
int cmd_preprocess(const Args& args);
int cmd_run(const Args& args);
int cmd_chat(const Args& args);
int cmd_bench(const Args& args);
int cmd_serve(const Args& args);
int cmd_quantize(const Args& args);
int cmd_make_test_model(const Args& args);
int cmd_pull(const Args& args);
int cmd_embed(const Args& args);

// Prints "qvl <command>: <message>" to stderr and returns the exit code for a usage/user error.
int fail(const std::string& command, const std::string& message);

}  // namespace qvl::cli
