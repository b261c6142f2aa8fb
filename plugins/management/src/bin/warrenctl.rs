//! `warrenctl`: rabbitmqctl's verbs over Warren's management HTTP API. See
//! [`warren_management::ctl`].

use std::io::Read;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stdin = if args.iter().any(|a| a == "import_definitions")
        && args.last().is_some_and(|a| a == "-")
    {
        let mut text = String::new();
        let _ = std::io::stdin().read_to_string(&mut text);
        Some(text)
    } else {
        None
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("Error: cannot start the runtime: {error}");
            std::process::exit(70);
        }
    };
    match runtime.block_on(warren_management::ctl::run(&args, stdin)) {
        Ok(output) => print!("{output}"),
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(error.exit_code);
        }
    }
}
