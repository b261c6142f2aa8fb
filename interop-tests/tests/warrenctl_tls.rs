//! warrenctl's HTTP client: the API over HTTPS with the server's certificate checked against
//! `--cacert` (and refused without it), and `--timeout` bounding a request to a server that
//! never answers.

use std::time::{Duration, Instant};

use warren_interop_tests::tls::Pki;
use warren_interop_tests::TestBroker;
use warren_management::ctl;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warrenctl_speaks_https_and_checks_the_server_certificate() {
    let pki = Pki::new("warrenctl-https");
    let (certfile, keyfile, ca) = (
        pki.path("server.pem"),
        pki.path("server-key.pem"),
        pki.path("ca.pem"),
    );
    let broker = TestBroker::start_with(&[
        ("management.ssl.ip", "127.0.0.1"),
        ("management.ssl.port", "0"),
        ("management.ssl.certfile", &certfile),
        ("management.ssl.keyfile", &keyfile),
    ])
    .await;
    let port = broker
        .server()
        .management_tls_addr()
        .expect("HTTPS listener")
        .port()
        .to_string();
    let listed = ctl::run(
        &args(&[
            "--host",
            "localhost",
            "--port",
            &port,
            "--tls",
            "--cacert",
            &ca,
            "-q",
            "list_vhosts",
        ]),
        None,
    )
    .await
    .expect("list_vhosts over HTTPS");
    assert!(listed.lines().any(|line| line.trim() == "/"), "{listed}");

    // Without the CA the test certificate is not trusted.
    let refused = ctl::run(
        &args(&[
            "--host",
            "localhost",
            "--port",
            &port,
            "--tls",
            "list_vhosts",
        ]),
        None,
    )
    .await
    .expect_err("an untrusted certificate is refused");
    assert_eq!(refused.exit_code, 69, "{refused}");
    assert!(
        refused.message.to_lowercase().contains("certificate"),
        "{refused}"
    );

    // --cacert without --tls is a usage error.
    let usage = ctl::run(&args(&["--cacert", &ca, "list_vhosts"]), None)
        .await
        .expect_err("usage");
    assert_eq!(usage.exit_code, 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warrenctl_gives_up_on_a_silent_server_after_its_timeout() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port().to_string();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let started = Instant::now();
    let error = ctl::run(
        &args(&[
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--timeout",
            "0.5",
            "list_queues",
        ]),
        None,
    )
    .await
    .expect_err("no answer");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(error.exit_code, 69, "{error}");
    assert!(
        error.message.contains("no response within 0.5 s"),
        "{error}"
    );
    holder.abort();
}
