use std::path::Path;

use super::*;
use crate::error::ConfigError;

fn error_text(result: Result<Settings, ConfigError>) -> String {
    match result {
        Ok(settings) => panic!("expected an error, got {settings:?}"),
        Err(error) => error.to_string(),
    }
}

fn args(list: &[&str]) -> impl Iterator<Item = String> {
    list.iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .into_iter()
}

#[test]
fn defaults_are_warrens_embedded_defaults() {
    let settings = Settings::default();
    assert_eq!(settings.amqp_listener, ListenAddr::new("0.0.0.0", 5672));
    assert!(settings.additional_amqp_listeners.is_empty());
    assert_eq!(settings.default_vhost, "/");
    assert_eq!(
        (
            settings.default_user.as_str(),
            settings.default_pass.as_str()
        ),
        ("guest", "guest")
    );
    assert_eq!(settings.loopback_users, vec!["guest".to_owned()]);
    assert_eq!(settings.heartbeat, 60);
    assert_eq!(settings.frame_max, 131_072);
    assert_eq!(settings.channel_max, 2047);
    assert_eq!(settings.max_message_size, 16_777_216);
    assert_eq!(settings.data_dir, PathBuf::from("warren-data"));
    assert_eq!(settings.load_definitions, None);
    assert_eq!(settings.log_level, LogLevel::Info);
    assert_eq!(settings.handshake_timeout, Duration::from_millis(10_000));
    assert_eq!(settings.connection_max, None);
}

#[test]
fn rabbitmq_conf_with_comments_blanks_and_whitespace() {
    let text = "\
# Warren test configuration
listeners.tcp.default = 127.0.0.1:5673

   # indented comment
default_vhost=/test
default_user =  admin
default_pass = pa=ss#word
heartbeat = 30
frame_max = 4096
channel_max = 0
max_message_size = 1048576
data_dir = /var/lib/warren
load_definitions = /etc/warren/definitions.json
log.console.level = debug
handshake_timeout = 5000
connection_max = 1000
";
    let settings = Settings::from_conf_str(text).expect("valid configuration");
    assert_eq!(settings.amqp_listener, ListenAddr::new("127.0.0.1", 5673));
    assert_eq!(settings.default_vhost, "/test");
    assert_eq!(settings.default_user, "admin");
    assert_eq!(
        settings.default_pass, "pa=ss#word",
        "split at the first '=', no inline comments"
    );
    assert_eq!(settings.heartbeat, 30);
    assert_eq!(settings.frame_max, 4096);
    assert_eq!(settings.channel_max, 0);
    assert_eq!(settings.max_message_size, 1_048_576);
    assert_eq!(settings.data_dir, PathBuf::from("/var/lib/warren"));
    assert_eq!(
        settings.load_definitions,
        Some(PathBuf::from("/etc/warren/definitions.json"))
    );
    assert_eq!(settings.log_level, LogLevel::Debug);
    assert_eq!(settings.handshake_timeout, Duration::from_millis(5000));
    assert_eq!(settings.connection_max, Some(1000));
}

#[test]
fn later_lines_override_earlier_ones() {
    let settings = Settings::from_conf_str(
        "heartbeat = 10\nheartbeat = 20\nconnection_max = 5\nconnection_max = infinity",
    )
    .expect("valid");
    assert_eq!(settings.heartbeat, 20);
    assert_eq!(settings.connection_max, None);
}

#[test]
fn named_listeners_are_additional_and_replace_by_name() {
    let settings = Settings::from_conf_str(
        "listeners.tcp.default = 5672\nlisteners.tcp.local = 127.0.0.1:5673\nlisteners.tcp.local_v6 = ::1:5673\nlisteners.tcp.local = 127.0.0.1:5674",
    )
    .expect("valid");
    assert_eq!(
        settings.additional_amqp_listeners,
        vec![
            ("local".to_owned(), ListenAddr::new("127.0.0.1", 5674)),
            ("local_v6".to_owned(), ListenAddr::new("::1", 5673)),
        ]
    );
    let all: Vec<String> = settings
        .amqp_listeners()
        .map(|a| a.to_socket_addr_string())
        .collect();
    assert_eq!(all, ["0.0.0.0:5672", "127.0.0.1:5674", "[::1]:5673"]);
}

#[test]
fn loopback_users_in_every_form() {
    let none = Settings::from_conf_str("loopback_users = none").expect("valid");
    assert!(none.loopback_users.is_empty());
    assert!(!none.is_loopback_user("guest"));

    let rabbit_form =
        Settings::from_conf_str("loopback_users.guest = false\nloopback_users.admin = true")
            .expect("valid");
    assert_eq!(rabbit_form.loopback_users, vec!["admin".to_owned()]);

    let list = Settings::from_conf_str("loopback_users = guest, admin").expect("valid");
    assert_eq!(
        list.loopback_users,
        vec!["guest".to_owned(), "admin".to_owned()]
    );

    let repeated = Settings::from_conf_str("loopback_users.guest = true").expect("valid");
    assert_eq!(
        repeated.loopback_users,
        vec!["guest".to_owned()],
        "no duplicates"
    );

    assert_eq!(
        error_text(Settings::from_conf_str("loopback_users.guest = yes")),
        "line 1: invalid value 'yes' for 'loopback_users.guest': expected true or false"
    );
    assert_eq!(
        error_text(Settings::from_conf_str("loopback_users = a,,b")),
        "line 1: invalid value 'a,,b' for 'loopback_users': expected 'none' or a comma-separated \
         list of user names"
    );
}

#[test]
fn max_message_size_accepts_size_suffixes_up_to_512_mib() {
    for (text, bytes) in [
        ("1024", 1024),
        ("64KB", 64_000),
        ("64 KiB", 65_536),
        ("16MiB", 16 << 20),
        ("100mb", 100_000_000),
        ("512MiB", 512 << 20),
        ("0GiB", 0),
    ] {
        let result = Settings::from_conf_str(&format!("max_message_size = {text}"));
        if bytes == 0 {
            assert!(result.is_err(), "{text}");
        } else {
            assert_eq!(result.map(|s| s.max_message_size), Ok(bytes), "{text}");
        }
    }
    for text in [
        "536870913",
        "1GiB",
        "1GB",
        "12XB",
        "-1",
        "MB",
        "99999999999999999999999",
    ] {
        let error = error_text(Settings::from_conf_str(&format!(
            "max_message_size = {text}"
        )));
        assert!(
            error.starts_with(&format!(
                "line 1: invalid value '{text}' for 'max_message_size': expected a size"
            )),
            "{error}"
        );
    }
}

#[test]
fn bad_values_name_key_value_and_expectation() {
    let cases = [
        ("heartbeat", "abc", "an integer between 0 and 65535 (seconds)"),
        ("heartbeat", "65536", "an integer between 0 and 65535 (seconds)"),
        ("frame_max", "4095", "an integer between 4096 and 4294967295 (bytes)"),
        ("frame_max", "0", "an integer between 4096 and 4294967295 (bytes)"),
        ("channel_max", "-1", "an integer between 0 and 65535"),
        ("log.console.level", "verbose", "one of debug, info, warning, error, critical, none"),
        ("handshake_timeout", "0", "a positive integer (milliseconds)"),
        ("handshake_timeout", "10s", "a positive integer (milliseconds)"),
        ("connection_max", "lots", "a non-negative integer or 'infinity'"),
        ("default_vhost", "", "a virtual host name"),
        ("default_user", "", "a user name"),
        ("data_dir", "", "a directory path"),
        (
            "msg_store_file_size_limit",
            "1000",
            "a size of at least 4096 bytes, as an integer or with a suffix",
        ),
        (
            "msg_store_max_unwritten_bytes",
            "0",
            "a positive size, as an integer or with a suffix",
        ),
        ("queue_max_in_memory_messages", "-5", "a non-negative integer"),
        (
            "queue_max_in_memory_bytes",
            "0",
            "a positive size, as an integer or with a suffix",
        ),
        ("load_definitions", "", "the path of a definitions.json file"),
        (
            "listeners.tcp.default",
            "localhost",
            "PORT, HOST:PORT, [IPV6]:PORT or IPV6:PORT with a port between 0 and 65535 (no ':PORT' after 'localhost')",
        ),
    ];
    for (key, value, expected) in cases {
        let mut settings = Settings::default();
        let error = settings.set(key, value).expect_err(key);
        assert_eq!(
            error.to_string(),
            format!("invalid value '{value}' for '{key}': expected {expected}")
        );
        assert_eq!(
            settings,
            Settings::default(),
            "a failed set changes nothing"
        );
    }
}

#[test]
fn unknown_keys_stop_start_up() {
    let mut settings = Settings::default();
    assert_eq!(
        settings.set("foo.bar", "1"),
        Err(ConfigError::UnknownKey {
            key: "foo.bar".into()
        })
    );
    assert_eq!(
        error_text(Settings::from_conf_str("heartbeat = 1\n\nheartbeet = 5")),
        "line 3: unknown configuration key 'heartbeet'"
    );
    for key in [
        "listeners.tcp",
        "listeners.tcp.",
        "listeners.tcp.a.b",
        "loopback_users.",
        "listeners.ssl.other",
    ] {
        assert!(
            matches!(
                settings.set(key, "5672"),
                Err(ConfigError::UnknownKey { .. })
            ),
            "{key}"
        );
    }
}

#[test]
fn lines_without_key_or_equals_name_the_line() {
    assert_eq!(
        error_text(Settings::from_conf_str("# comment\nheartbeat 30")),
        "line 2: expected 'key = value', found 'heartbeat 30'"
    );
    assert_eq!(
        error_text(Settings::from_conf_str("\n\n = 5")),
        "line 3: expected 'key = value', found no key"
    );
    let error = Settings::from_conf_str("heartbeat = x").expect_err("bad value");
    assert!(matches!(error, ConfigError::Line { line: 1, .. }));
    assert!(
        matches!(error.innermost(), ConfigError::InvalidValue { key, .. } if key == "heartbeat")
    );
}

#[test]
fn files_are_read_and_errors_name_the_path() {
    let dir = std::env::temp_dir().join(format!("warren-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let good = dir.join("good.conf");
    let bad = dir.join("bad.conf");
    std::fs::write(&good, "heartbeat = 15\n").expect("write");
    std::fs::write(&bad, "heartbeat = 15\nframe_max = 10\n").expect("write");

    assert_eq!(Settings::from_file(&good).map(|s| s.heartbeat), Ok(15));
    assert_eq!(
        error_text(Settings::from_file(&bad)),
        format!(
            "{}: line 2: invalid value '10' for 'frame_max': expected an integer between 4096 \
             and 4294967295 (bytes)",
            bad.display()
        )
    );
    let missing = dir.join("missing.conf");
    let error = error_text(Settings::from_file(&missing));
    assert!(
        error.starts_with(&format!(
            "{}: cannot read configuration file: ",
            missing.display()
        )),
        "{error}"
    );

    // The command line: the file first, then each --set in order, whatever the position.
    let settings = Settings::from_args(args(&[
        "--set",
        "heartbeat=20",
        "--config",
        good.to_str().expect("utf-8 temp path"),
        "--set=heartbeat = 25",
        "--set",
        "listeners.tcp.default=0",
    ]))
    .expect("valid arguments");
    assert_eq!(settings.heartbeat, 25);
    assert_eq!(settings.amqp_listener.port, 0);

    let error = error_text(Settings::from_args(args(&[
        "--config",
        bad.to_str().expect("utf-8"),
    ])));
    assert!(
        error.starts_with(&format!("{}: line 2:", bad.display())),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn command_line_without_file() {
    let settings = Settings::from_args(args(&[
        "--set",
        "default_user=admin",
        "--set",
        "default_pass=a=b",
    ]))
    .expect("valid");
    assert_eq!(settings.default_user, "admin");
    assert_eq!(settings.default_pass, "a=b");
    assert_eq!(Settings::from_args(args(&[])), Ok(Settings::default()));
}

#[test]
fn command_line_errors_name_the_argument() {
    for help in ["--help", "-h"] {
        match Settings::from_args(args(&["--set", "heartbeat=1", help])) {
            Err(ConfigError::HelpRequested(usage)) => {
                assert!(usage.starts_with("Usage: warren"), "{usage}");
                assert!(usage.contains("listeners.tcp.default"), "{usage}");
                assert!(usage.contains("max_message_size"), "{usage}");
            }
            other => panic!("{help}: {other:?}"),
        }
    }
    let cases: [(&[&str], &str); 7] = [
        (&["--verbose"], "unknown argument '--verbose' (try --help)"),
        (&["warren"], "unknown argument 'warren' (try --help)"),
        (&["--config"], "'--config' needs a file path"),
        (&["--set"], "'--set' needs KEY=VALUE"),
        (&["--config", "a", "--config=b"], "'--config' may be given only once"),
        (&["--set", "heartbeat"], "--set heartbeat: expected 'key = value', found 'heartbeat'"),
        (
            &["--set", "heartbeat=-1"],
            "--set heartbeat=-1: invalid value '-1' for 'heartbeat': expected an integer between 0 \
             and 65535 (seconds)",
        ),
    ];
    for (arguments, message) in cases {
        assert_eq!(
            error_text(Settings::from_args(args(arguments))),
            message,
            "{arguments:?}"
        );
    }
    assert_eq!(
        error_text(Settings::from_args(args(&["--set", "nope=1"]))),
        "--set nope=1: unknown configuration key 'nope'"
    );
}

#[test]
fn log_levels_map_to_tracing() {
    for (name, directive) in [
        ("debug", "debug"),
        ("info", "info"),
        ("warning", "warn"),
        ("error", "error"),
        ("critical", "error"),
        ("none", "off"),
    ] {
        let level = LogLevel::from_name(name).expect(name);
        assert_eq!(level.name(), name);
        assert_eq!(level.tracing_directive(), directive);
    }
}

#[test]
fn resource_alarm_limits_in_every_form() {
    let defaults = Settings::default();
    assert_eq!(
        defaults.memory_high_watermark,
        MemoryHighWatermark::Relative(0.6)
    );
    assert_eq!(
        defaults.disk_free_limit,
        DiskFreeLimit::Absolute(50_000_000)
    );
    assert_eq!(defaults.total_memory_override, None);

    let settings = Settings::from_conf_str(
        "vm_memory_high_watermark.relative = 0.4\n\
         disk_free_limit.relative = 1.5\n\
         total_memory_available_override_value = 2GiB\n",
    )
    .expect("valid");
    assert_eq!(
        settings.memory_high_watermark,
        MemoryHighWatermark::Relative(0.4)
    );
    assert_eq!(settings.disk_free_limit, DiskFreeLimit::Relative(1.5));
    assert_eq!(settings.total_memory_override, Some(2 << 30));

    // The later of the two forms wins, as in RabbitMQ.
    let settings = Settings::from_conf_str(
        "vm_memory_high_watermark.relative = 0.4\n\
         vm_memory_high_watermark.absolute = 512MiB\n\
         disk_free_limit.absolute = 1GB\n",
    )
    .expect("valid");
    assert_eq!(
        settings.memory_high_watermark,
        MemoryHighWatermark::Absolute(512 << 20)
    );
    assert_eq!(
        settings.disk_free_limit,
        DiskFreeLimit::Absolute(1_000_000_000)
    );

    for bad in [
        "vm_memory_high_watermark.relative = -0.1",
        "vm_memory_high_watermark.relative = lots",
        "vm_memory_high_watermark.absolute = 5 parsecs",
        "disk_free_limit.absolute = -1",
        "disk_free_limit.relative = NaN",
        "total_memory_available_override_value = 0",
    ] {
        let text = error_text(Settings::from_conf_str(bad));
        let key = bad.split(" =").next().expect("key");
        assert!(text.contains(key), "{bad}: {text}");
    }
}

#[test]
fn message_store_keys_take_sizes_and_counts() {
    let mut settings = Settings::default();
    assert_eq!(settings.msg_store_file_size_limit, 16 * 1024 * 1024);
    assert_eq!(settings.msg_store_max_unwritten_bytes, 64 * 1024 * 1024);
    assert_eq!(settings.queue_max_in_memory_messages, 100_000);
    settings
        .set("msg_store_file_size_limit", "1MiB")
        .expect("size");
    settings
        .set("msg_store_max_unwritten_bytes", "8388608")
        .expect("size");
    settings
        .set("queue_max_in_memory_messages", "0")
        .expect("count");
    assert_eq!(settings.msg_store_file_size_limit, 1024 * 1024);
    assert_eq!(settings.msg_store_max_unwritten_bytes, 8 * 1024 * 1024);
    assert_eq!(settings.queue_max_in_memory_messages, 0);
    assert_eq!(settings.queue_max_in_memory_bytes, 64 * 1024 * 1024);
    settings
        .set("queue_max_in_memory_bytes", "16MiB")
        .expect("size");
    assert_eq!(settings.queue_max_in_memory_bytes, 16 * 1024 * 1024);
}

#[test]
fn management_and_prometheus_listeners_take_rabbitmq_keys() {
    let mut settings = Settings::default();
    assert_eq!(settings.management_listener.port, 15672);
    assert_eq!(settings.prometheus_listener.port, 15692);
    settings.set("management.tcp.port", "0").unwrap();
    settings.set("management.tcp.ip", "127.0.0.1").unwrap();
    settings.set("prometheus.tcp.ip", "::1").unwrap();
    settings.set("plugins.prometheus", "false").unwrap();
    assert_eq!(
        settings.management_listener.to_socket_addr_string(),
        "127.0.0.1:0"
    );
    assert_eq!(settings.prometheus_listener.host, "::1");
    assert!(!settings.prometheus_enabled);
    assert!(settings.set("management.tcp.port", "70000").is_err());
    assert!(settings.set("plugins.management", "yes").is_err());
}

#[test]
fn management_https_keys_set_an_extra_listener() {
    let mut settings = Settings::default();
    assert!(settings.management_tls_listener.is_none());
    settings.set("management.ssl.port", "15671").unwrap();
    settings
        .set("management.ssl.certfile", "/etc/warren/cert.pem")
        .unwrap();
    settings
        .set("management.ssl.keyfile", "/etc/warren/key.pem")
        .unwrap();
    assert_eq!(
        settings.management_tls_listener,
        Some(ListenAddr::new("0.0.0.0", 15671))
    );
    assert_eq!(
        settings.management_tls_certfile.as_deref(),
        Some(Path::new("/etc/warren/cert.pem"))
    );
    assert!(settings.set("management.ssl.certfile", "").is_err());
}

#[test]
fn amqps_listener_and_ssl_options_take_rabbitmq_keys() {
    let mut settings = Settings::default();
    assert!(settings.amqps_listener.is_none());
    settings.set("listeners.ssl.default", "5671").unwrap();
    settings.set("ssl_options.certfile", "/c.pem").unwrap();
    settings.set("ssl_options.keyfile", "/k.pem").unwrap();
    settings.set("ssl_options.cacertfile", "/ca.pem").unwrap();
    settings.set("ssl_options.verify", "verify_peer").unwrap();
    settings
        .set("ssl_options.fail_if_no_peer_cert", "true")
        .unwrap();
    assert_eq!(
        settings.amqps_listener,
        Some(ListenAddr::new("0.0.0.0", 5671))
    );
    assert!(settings.ssl_options.verify_peer && settings.ssl_options.fail_if_no_peer_cert);
    assert_eq!(
        settings.ssl_options.cacertfile.as_deref(),
        Some(Path::new("/ca.pem"))
    );
    assert!(settings.set("ssl_options.verify", "maybe").is_err());
}

#[test]
fn certificate_login_and_auth_mechanisms_take_rabbitmq_keys() {
    let mut settings = Settings::default();
    assert_eq!(
        settings.ssl_cert_login_from,
        CertLoginFrom::DistinguishedName
    );
    assert_eq!(settings.auth_mechanisms(), vec!["PLAIN", "AMQPLAIN"]);
    settings.set("ssl_cert_login_from", "common_name").unwrap();
    assert_eq!(settings.ssl_cert_login_from, CertLoginFrom::CommonName);
    // The first auth_mechanisms key replaces the default list; a repeated N replaces its entry.
    settings.set("auth_mechanisms.1", "EXTERNAL").unwrap();
    assert_eq!(settings.auth_mechanisms(), vec!["EXTERNAL"]);
    settings.set("auth_mechanisms.2", "AMQPLAIN").unwrap();
    settings.set("auth_mechanisms.2", "PLAIN").unwrap();
    assert_eq!(settings.auth_mechanisms(), vec!["EXTERNAL", "PLAIN"]);
    assert!(settings.set("auth_mechanisms.3", "CRAM-MD5").is_err());
    assert!(settings.set("ssl_cert_login_from", "subject").is_err());
}

#[test]
fn prometheus_over_https_takes_rabbitmq_keys() {
    let mut settings = Settings::default();
    assert!(settings.prometheus_tls_listener.is_none());
    settings.set("prometheus.ssl.port", "15691").unwrap();
    settings.set("prometheus.ssl.ip", "127.0.0.1").unwrap();
    settings
        .set("prometheus.ssl.certfile", "/etc/warren/cert.pem")
        .unwrap();
    settings
        .set("prometheus.ssl.keyfile", "/etc/warren/key.pem")
        .unwrap();
    assert_eq!(
        settings.prometheus_tls_listener,
        Some(ListenAddr::new("127.0.0.1", 15691))
    );
    assert_eq!(
        settings.prometheus_tls_keyfile.as_deref(),
        Some(Path::new("/etc/warren/key.pem"))
    );
    assert!(settings.management_tls_listener.is_none());
    assert!(settings.set("prometheus.ssl.port", "x").is_err());
    assert!(settings.set("prometheus.ssl.certfile", "").is_err());
}

#[test]
fn https_client_certificate_keys_are_set_per_endpoint() {
    let mut settings = Settings::default();
    assert_eq!(
        settings.management_tls_verification,
        PeerVerification::default()
    );
    settings
        .set("management.ssl.cacertfile", "/etc/warren/ca.pem")
        .unwrap();
    settings
        .set("management.ssl.verify", "verify_peer")
        .unwrap();
    settings
        .set("management.ssl.fail_if_no_peer_cert", "true")
        .unwrap();
    settings
        .set("prometheus.ssl.verify", "verify_peer")
        .unwrap();
    assert_eq!(
        settings.management_tls_verification,
        PeerVerification {
            cacertfile: Some("/etc/warren/ca.pem".into()),
            verify_peer: true,
            fail_if_no_peer_cert: true,
        }
    );
    assert_eq!(
        settings.prometheus_tls_verification,
        PeerVerification {
            cacertfile: None,
            verify_peer: true,
            fail_if_no_peer_cert: false,
        }
    );
    assert!(settings.set("management.ssl.verify", "yes").is_err());
    assert!(settings
        .set("prometheus.ssl.fail_if_no_peer_cert", "1")
        .is_err());
    assert!(settings.set("prometheus.ssl.cacertfile", "").is_err());
}

#[test]
fn server_properties_are_set_by_name_and_capabilities_are_refused() {
    let mut settings = Settings::default();
    settings
        .set("server_properties.product", "RabbitMQ")
        .unwrap();
    settings.set("server_properties.version", "3.13.7").unwrap();
    settings
        .set("server_properties.product", "RabbitMQ Server")
        .unwrap();
    assert_eq!(
        settings.server_properties,
        vec![
            ("product".to_string(), "RabbitMQ Server".to_string()),
            ("version".to_string(), "3.13.7".to_string()),
        ]
    );
    let error = settings
        .set("server_properties.capabilities", "none")
        .unwrap_err();
    assert!(error.to_string().contains("capabilities"), "{error}");
}

#[test]
fn the_table_has_each_key_once_and_every_key_is_found_through_it() {
    let mut seen = std::collections::HashSet::new();
    for setting in table::all() {
        assert!(seen.insert(setting.key), "{} is listed twice", setting.key);
        let found = if setting.is_family() {
            let member = format!("{}example", setting.key.split('<').next().unwrap_or(""));
            table::Setting::family(&member).map(|(found, _)| found.key)
        } else {
            table::Setting::exact(setting.key).map(|found| found.key)
        };
        assert_eq!(found, Some(setting.key));
    }
}

#[test]
fn setting_a_default_from_the_table_changes_nothing() {
    for setting in table::all().filter(|setting| !setting.default.is_empty()) {
        let mut settings = Settings::default();
        settings
            .set(setting.key, setting.default)
            .unwrap_or_else(|error| panic!("{}: {error}", setting.key));
        assert_eq!(
            settings,
            Settings::default(),
            "{} = {} is not the default",
            setting.key,
            setting.default
        );
    }
}

#[test]
fn help_lists_every_key_of_the_table_with_its_default() {
    let usage = crate::cli::usage();
    for setting in table::all() {
        let line = usage
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{} ", setting.key)))
            .unwrap_or_else(|| panic!("--help does not list {}", setting.key));
        assert!(line.contains(setting.help), "{line}");
        if !setting.default.is_empty() {
            assert!(line.ends_with(&format!("({})", setting.default)), "{line}");
        }
    }
}

/// The `(key, default cell)` rows of every table in docs/configuration.md; a row naming
/// several keys (`` `a` / `b` ``) gives one row per key, with the matching part of the default
/// cell when it has one per key.
fn documented_keys() -> Vec<(String, String)> {
    let text = include_str!("../../../docs/configuration.md");
    let mut rows = Vec::new();
    for line in text.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 5, "a row of three cells: {line}");
        let keys: Vec<&str> = cells[1]
            .split(" / ")
            .map(|key| key.trim().trim_matches('`'))
            .collect();
        let default = cells[2];
        let defaults: Vec<&str> = default.split(" / ").collect();
        for (index, key) in keys.iter().enumerate() {
            let default = if defaults.len() == keys.len() {
                defaults[index]
            } else {
                default
            };
            rows.push(((*key).to_owned(), default.to_owned()));
        }
    }
    rows
}

#[test]
fn docs_configuration_md_documents_exactly_the_tables_keys_with_their_defaults() {
    let documented = documented_keys();
    for setting in table::all() {
        let (_, default) = documented
            .iter()
            .find(|(key, _)| key == setting.key)
            .unwrap_or_else(|| panic!("docs/configuration.md does not document {}", setting.key));
        if !setting.default.is_empty() {
            assert!(
                default.contains(&format!("`{}`", setting.default)),
                "docs/configuration.md gives {} the default {default}, the table {}",
                setting.key,
                setting.default
            );
        }
    }
    for (key, _) in &documented {
        assert!(
            table::all().any(|setting| setting.key == key),
            "docs/configuration.md documents {key}, which is not in the tables"
        );
    }
}
