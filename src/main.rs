//! The `warren` server binary: parse settings, log to stderr, run until SIGTERM or SIGINT.

use std::io::IsTerminal;
use std::process::ExitCode;

use warren::Server;
use warren_config::{ConfigError, Settings};

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
    runtime.block_on(async {
        // Install the handlers before listening: a SIGTERM that arrives once the listening
        // line is logged must shut down gracefully, not kill the process by default action.
        let signals = Signals::install();
        let server = match Server::start(settings).await {
            Ok(server) => server,
            Err(error) => {
                tracing::error!("{error}");
                eprintln!("warren: {error}");
                return ExitCode::FAILURE;
            }
        };
        signals.wait().await;
        tracing::info!("shutting down");
        server.shutdown().await;
        ExitCode::SUCCESS
    })
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
