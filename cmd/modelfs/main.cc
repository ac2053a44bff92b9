// modelfs: the command-line tool. See docs/cli.md for commands and exit codes.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cmd/modelfs/cli.h"
#include "core/base/heap.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"

int main(int argc, char** argv) {
  modelfs::BoundHeapGrowth();
  CLI::App app{
      "modelfs: model weights from OCI registries, lazily mounted and verified.\n"
      "Exit codes: 0 success, 1 verification failure, 2 bad input or usage.",
      "modelfs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("modelfs ") + MODELFS_VERSION);
  modelfs::cli::Context ctx;
  modelfs::cli::RegisterInspect(app, ctx);
  modelfs::cli::RegisterMemory(app, ctx);
  modelfs::cli::RegisterDigest(app, ctx);
  modelfs::cli::RegisterRegistryCommands(app, ctx);
  modelfs::cli::RegisterFetch(app, ctx);
  modelfs::cli::RegisterVerify(app, ctx);
  modelfs::cli::RegisterSign(app, ctx);
  modelfs::cli::RegisterAttest(app, ctx);
  modelfs::cli::RegisterStateCommands(app, ctx);
  modelfs::cli::RegisterDiff(app, ctx);
#ifdef MODELFS_NODE_COMMANDS
  modelfs::cli::RegisterNodeCommands(app, ctx);
#endif
  modelfs::cli::RegisterMountCommands(app, ctx, std::vector<std::string>(argv, argv + argc));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return modelfs::kExitUsage;
  } catch (const std::exception& e) {
    fprintf(stderr, "modelfs: internal error: %s\n", modelfs::EscapeUntrusted(e.what()).c_str());
    return modelfs::kExitVerify;
  }
  if (!ctx.status.ok()) {
    // Messages quote names from artifacts and registries: one escaped line.
    fprintf(stderr, "modelfs: %s\n",
            modelfs::EscapeUntrusted(std::string(ctx.status.message())).c_str());
    return modelfs::ExitCodeFor(ctx.status);
  }
  return modelfs::kExitOk;
}
