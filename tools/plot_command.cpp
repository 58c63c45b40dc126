// glint plot: runs `python3 -m glint.plot` (python/glint/plot.py) with the glint package on
// PYTHONPATH, so that the plots are one command as typed. Every argument after `plot` goes to
// the Python command unchanged (its --help included).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "commands.hpp"

#ifndef GLINT_PYTHON_BUILD_DIR
#define GLINT_PYTHON_BUILD_DIR ""
#endif
#ifndef GLINT_PYTHON_INSTALL_DIR
#define GLINT_PYTHON_INSTALL_DIR "lib/python3/dist-packages"
#endif
#ifndef GLINT_PYTHON_EXECUTABLE
#define GLINT_PYTHON_EXECUTABLE "python3"
#endif

namespace glint::tools {
namespace {

namespace fs = std::filesystem;

bool holds_package(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "glint" / "plot.py", ec);
}

/// The directory that holds the glint package: next to this executable in a build tree
/// (build/bin/glint -> build/python), in the installed tree (PREFIX/bin/glint ->
/// PREFIX/<GLINT_PYTHON_INSTALL_DIR>), or the build tree this glint was built in.
fs::path package_dir() {
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (!ec) {
    const fs::path prefix = exe.parent_path().parent_path();
    for (const fs::path& dir : {prefix / "python", prefix / GLINT_PYTHON_INSTALL_DIR})
      if (holds_package(dir)) return dir;
  }
  const fs::path built = GLINT_PYTHON_BUILD_DIR;
  if (!built.empty() && holds_package(built)) return built;
  return {};
}

[[noreturn]] void run_plot(const std::vector<std::string>& args) {
  const fs::path dir = package_dir();
  if (dir.empty())
    fail("glint plot",
         "the glint Python package was not found next to this glint (build/python, or " +
             std::string(GLINT_PYTHON_INSTALL_DIR) + " under the installation prefix)",
         kExitFailure);
  std::string path = dir.string();
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0')
    path += std::string(":") + old;
  ::setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<std::string> argv_s = {GLINT_PYTHON_EXECUTABLE, "-m", "glint.plot"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The interpreter glint was built for; else python3 on PATH.
  ::execv(argv[0], argv.data());
  argv_s[0] = "python3";
  argv[0] = argv_s[0].data();
  ::execvp(argv[0], argv.data());
  fail("glint plot", std::string("cannot run python3: ") + std::strerror(errno), kExitFailure);
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plot", "plot a run file's products and pedestal as PNG (hitmap, energy, spectrum, "
              "pedestal, noise, eta, subpixel, recon; python3 -m glint.plot; --help for its "
              "options)");
  cmd->prefix_command();
  cmd->set_help_flag();
  cmd->callback([cmd] { run_plot(cmd->remaining()); });
}

}  // namespace glint::tools
