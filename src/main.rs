//! The `warren` server binary: parse settings, log to stderr, run until SIGTERM or SIGINT.
//! When `join_cluster` or `reset` asks for a restart, it shuts down and runs itself again (same
//! process id, arguments and environment), and the new start completes the join.

use std::io::IsTerminal;
use std::process::ExitCode;

use warren::Server;
use warren_config::{ConfigError, Settings};

/// How long the shutdown before a `join_cluster` or `reset` restart may take.
const RESTART_SHUTDOWN_LIMIT: std::time::Duration = std::time::Duration::from_secs(15);

fn main() -> ExitCode {
    let settings = match Settings::from_args(std::env::args().skip(1)) {
        Ok(settings) => settings,
        Err(ConfigError::HelpRequested(usage)) => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("warren: {error}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WARREN_LOG").unwrap_or_else(|_| {
                // openraft logs every unreachable peer at warn and error on each retry:
                // Warren logs the link states itself.
                tracing_subscriber::EnvFilter::new(format!(
                    "{},openraft=off",
                    settings.log_level.tracing_directive()
                ))
            }),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("warren: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    warren::limits::raise_open_file_limit();
    let outcome = runtime.block_on(async {
        // Install the handlers before listening: a SIGTERM that arrives once the listening
        // line is logged must shut down gracefully, not kill the process by default action.
        let signals = Signals::install();
        let server = match Server::start(settings).await {
            Ok(server) => server,
            Err(error) => {
                tracing::error!("{error}");
                eprintln!("warren: {error}");
                return Ok(ExitCode::FAILURE);
            }
        };
        let restart = tokio::select! {
            _ = signals.wait() => false,
            _ = server.restart_requested() => true,
        };
        match restart {
            true => tracing::info!("restarting to complete join_cluster or reset"),
            false => tracing::info!("shutting down"),
        }
        match restart {
            true => {
                // The next start empties data_dir: a shutdown that hangs must not keep
                // the node from joining.
                if tokio::time::timeout(RESTART_SHUTDOWN_LIMIT, server.shutdown())
                    .await
                    .is_err()
                {
                    tracing::warn!(limit = ?RESTART_SHUTDOWN_LIMIT, "shutdown did not finish; restarting anyway");
                }
                Err(())
            }
            false => {
                server.shutdown().await;
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    match outcome {
        Ok(code) => code,
        Err(()) => run_again(),
    }
}

/// Replaces this process by a new run of the same executable with the same arguments.
#[cfg(unix)]
fn run_again() -> ExitCode {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "warren".into());
    // /proc/self/exe is this very executable even if its file was replaced meanwhile.
    let executable = match std::path::Path::new("/proc/self/exe").exists() {
        true => std::path::PathBuf::from("/proc/self/exe"),
        false => std::env::current_exe().unwrap_or_else(|_| arg0.clone().into()),
    };
    let error = std::process::Command::new(executable)
        .arg0(&arg0)
        .args(args)
        .exec();
    eprintln!("warren: cannot restart to complete join_cluster or reset: {error}; start it again");
    ExitCode::FAILURE
}

/// Without exec, the process ends: started again, it completes the join.
#[cfg(not(unix))]
fn run_again() -> ExitCode {
    eprintln!("warren: stopped to complete join_cluster or reset; start it again");
    ExitCode::SUCCESS
}

/// SIGTERM and SIGINT handlers, installed once at start-up.
struct Signals {
    #[cfg(unix)]
    unix: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let unix = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            Signals { unix }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// Waits for SIGTERM or SIGINT (Ctrl-C elsewhere).
    async fn wait(self) {
        #[cfg(unix)]
        {
            if let Some((mut term, mut int)) = self.unix {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                return;
            }
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
