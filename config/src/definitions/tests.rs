use super::*;
use warren_core::value::Value;

fn sha256_hash(password: &str) -> String {
    PasswordHash::with_salt(HashingAlgorithm::Sha256, [0x90, 0x8D, 0xC6, 0x0A], password)
        .to_base64()
}

fn sha512_hash(password: &str) -> String {
    PasswordHash::with_salt(HashingAlgorithm::Sha512, [1, 2, 3, 4], password).to_base64()
}

/// What `rabbitmqctl export_definitions` writes on RabbitMQ 3.10, trimmed to one of each kind
/// (plus an old-style tags string and a plugin exchange).
fn rabbitmq_3_10_export() -> String {
    format!(
        r#"{{
  "rabbit_version": "3.10.7",
  "rabbitmq_version": "3.10.7",
  "product_name": "RabbitMQ",
  "product_version": "3.10.7",
  "users": [
    {{
      "name": "guest",
      "password_hash": "{guest}",
      "hashing_algorithm": "rabbit_password_hashing_sha256",
      "tags": ["administrator"],
      "limits": {{}}
    }},
    {{
      "name": "orders-app",
      "password_hash": "{app}",
      "hashing_algorithm": "rabbit_password_hashing_sha512",
      "tags": "monitoring, management",
      "limits": {{"max-connections": 10}}
    }},
    {{
      "name": "cert-only",
      "password_hash": "",
      "tags": []
    }}
  ],
  "vhosts": [
    {{"name": "/", "limits": [], "metadata": {{"description": "Default virtual host", "tags": []}}}},
    {{
      "name": "orders",
      "description": "Order processing",
      "tags": ["production"],
      "limits": [],
      "metadata": {{"description": "Order processing", "tags": ["production"], "default_queue_type": "quorum"}}
    }}
  ],
  "permissions": [
    {{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}},
    {{"user": "orders-app", "vhost": "orders", "configure": "^orders\\.", "write": "^(orders|amq\\.default)", "read": ""}}
  ],
  "topic_permissions": [
    {{"user": "orders-app", "vhost": "orders", "exchange": "amq.topic", "write": "^orders\\.", "read": ".*"}}
  ],
  "parameters": [],
  "global_parameters": [
    {{"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-3kQGLXhH5Zb8HyVg0Q6oRw"}}
  ],
  "policies": [
    {{
      "vhost": "orders",
      "name": "orders-ttl",
      "pattern": "^orders\\.",
      "apply-to": "queues",
      "definition": {{"message-ttl": 86400000, "max-length": 100000}},
      "priority": 0
    }}
  ],
  "queues": [
    {{
      "name": "orders.created",
      "vhost": "orders",
      "durable": true,
      "auto_delete": false,
      "arguments": {{
        "x-queue-type": "classic",
        "x-message-ttl": 60000,
        "x-dead-letter-exchange": "orders.dlx",
        "x-single-active-consumer": false
      }}
    }},
    {{"name": "orders.dead", "vhost": "orders", "durable": true, "auto_delete": false, "arguments": {{}}, "type": "quorum"}},
    {{"name": "scratch", "vhost": "/", "durable": false, "auto_delete": true, "arguments": {{}}}}
  ],
  "exchanges": [
    {{"name": "orders", "vhost": "orders", "type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {{}}}},
    {{"name": "orders.dlx", "vhost": "orders", "type": "fanout", "durable": true, "auto_delete": false, "internal": true, "arguments": {{}}}},
    {{"name": "orders.delayed", "vhost": "orders", "type": "x-delayed-message", "durable": true, "auto_delete": false, "internal": false, "arguments": {{"x-delayed-type": "direct"}}}}
  ],
  "bindings": [
    {{"source": "orders", "vhost": "orders", "destination": "orders.created", "destination_type": "queue", "routing_key": "order.created.#", "arguments": {{}}}},
    {{"source": "orders.dlx", "vhost": "orders", "destination": "orders.dead", "destination_type": "queue", "routing_key": "", "arguments": {{}}}},
    {{"source": "orders.delayed", "vhost": "orders", "destination": "orders", "destination_type": "exchange", "routing_key": "order.#", "arguments": {{}}}},
    {{"source": "amq.fanout", "vhost": "/", "destination": "scratch", "destination_type": "queue", "routing_key": "", "arguments": {{"x-match": "all"}}}}
  ]
}}"#,
        guest = sha256_hash("guest"),
        app = sha512_hash("orders-secret"),
    )
}

fn problems(result: Result<ValidationReport, DefinitionsError>) -> Vec<String> {
    match result {
        Err(DefinitionsError::Invalid { problems, .. }) => problems,
        other => panic!("expected validation problems, got {other:?}"),
    }
}

#[test]
fn rabbitmq_3_10_export_parses_completely() {
    let definitions = Definitions::from_json_str(&rabbitmq_3_10_export()).expect("export parses");
    assert_eq!(definitions.rabbit_version.as_deref(), Some("3.10.7"));
    assert_eq!(definitions.rabbitmq_version.as_deref(), Some("3.10.7"));
    assert_eq!(definitions.product_name.as_deref(), Some("RabbitMQ"));
    assert_eq!(definitions.product_version.as_deref(), Some("3.10.7"));
    assert_eq!(definitions.source, None);

    let [guest, app, cert_only] = &definitions.users[..] else {
        panic!("three users: {:?}", definitions.users)
    };
    assert_eq!(guest.tags, ["administrator"]);
    assert_eq!(
        app.tags,
        ["monitoring", "management"],
        "pre-3.9 comma-separated tags"
    );
    assert_eq!(app.limits, serde_json::json!({"max-connections": 10}));
    assert_eq!(cert_only.hashing_algorithm, None);
    let guest_hash = guest.credentials().expect("guest hash");
    assert!(guest_hash.verify("guest") && !guest_hash.verify("wrong"));
    let app_hash = app.credentials().expect("sha512 hash");
    assert_eq!(app_hash.algorithm, HashingAlgorithm::Sha512);
    assert!(app_hash.verify("orders-secret") && !app_hash.verify("guest"));
    let cert_hash = cert_only
        .credentials()
        .expect("empty hash, default algorithm");
    assert!(!cert_hash.allows_password_login());

    let orders = &definitions.vhosts[1];
    assert_eq!(orders.description.as_deref(), Some("Order processing"));
    assert_eq!(orders.tags, ["production"]);
    assert_eq!(orders.default_queue_type, None);
    assert_eq!(orders.effective_default_queue_type(), Some("quorum"));
    assert_eq!(definitions.vhosts[0].effective_default_queue_type(), None);

    assert_eq!(
        definitions.permissions[1],
        PermissionDefinition {
            user: "orders-app".into(),
            vhost: "orders".into(),
            configure: r"^orders\.".into(),
            write: r"^(orders|amq\.default)".into(),
            read: "".into(),
        }
    );

    let created = &definitions.queues[0];
    assert!(created.durable && !created.auto_delete);
    assert_eq!(created.queue_type, None);
    let arguments = json_args_to_table(&created.arguments);
    assert_eq!(arguments.get("x-message-ttl"), Some(&Value::I64(60000)));
    assert_eq!(
        arguments.get("x-dead-letter-exchange"),
        Some(&Value::string("orders.dlx"))
    );
    assert_eq!(
        arguments.get("x-single-active-consumer"),
        Some(&Value::Bool(false))
    );
    assert_eq!(definitions.queues[1].queue_type.as_deref(), Some("quorum"));
    assert!(!definitions.queues[2].durable && definitions.queues[2].auto_delete);

    let dlx = &definitions.exchanges[1];
    assert_eq!(
        (dlx.exchange_type.as_str(), dlx.durable, dlx.internal),
        ("fanout", true, true)
    );

    let to_exchange = &definitions.bindings[2];
    assert_eq!(to_exchange.destination_type, DestinationType::Exchange);
    assert_eq!(to_exchange.routing_key, "order.#");
    assert_eq!(
        json_args_to_table(&definitions.bindings[3].arguments).get("x-match"),
        Some(&Value::string("all"))
    );

    assert_eq!(
        definitions.unapplied(),
        UnappliedCounts {
            policies: 1,
            parameters: 0,
            global_parameters: 1,
            topic_permissions: 1,
        }
    );
    assert_eq!(
        definitions.policies[0]["definition"]["message-ttl"],
        86_400_000
    );
}

#[test]
fn rabbitmq_3_10_export_validates_and_reports_what_is_not_applied() {
    let definitions = Definitions::from_json_str(&rabbitmq_3_10_export()).expect("export parses");
    let report = definitions.validate("/", &[]).expect("export is valid");
    assert_eq!(
        report.plugin_exchanges,
        vec![PluginExchange {
            vhost: "orders".into(),
            name: "orders.delayed".into(),
            exchange_type: "x-delayed-message".into(),
        }]
    );
    assert_eq!(
        report.plugin_exchanges[0].to_string(),
        "exchange 'orders.delayed' in vhost 'orders' has plugin type 'x-delayed-message'"
    );
    assert_eq!(
        report.unapplied.to_string(),
        "kept but not applied yet: 1 policy, 1 global parameter, 1 topic permission"
    );
}

#[test]
fn empty_and_minimal_documents() {
    let empty = Definitions::from_json_str("{}").expect("empty object");
    assert_eq!(empty, Definitions::default());
    let report = empty.validate("/", &[]).expect("nothing to check");
    assert!(report.unapplied.is_empty());
    assert_eq!(
        report.unapplied.to_string(),
        "nothing kept without being applied"
    );

    let nulls = Definitions::from_json_str(
        r#"{"users": null, "queues": [{"name": "q", "vhost": "/", "arguments": null}], "future_section": [1]}"#,
    )
    .expect("nulls and unknown sections are tolerated");
    assert!(nulls.users.is_empty());
    let queue = &nulls.queues[0];
    assert!(queue.durable && !queue.auto_delete && queue.arguments.is_empty());
}

#[test]
fn tags_are_read_in_both_forms() {
    let parse = |tags: &str| {
        Definitions::from_json_str(&format!(
            r#"{{"users": [{{"name": "u", "password_hash": "", "tags": {tags}}}],
                "vhosts": [{{"name": "v", "tags": {tags}}}]}}"#
        ))
        .map(|d| (d.users[0].tags.clone(), d.vhosts[0].tags.clone()))
    };
    let expected = vec!["administrator".to_owned(), "policymaker".to_owned()];
    assert_eq!(
        parse(r#"["administrator", "policymaker"]"#),
        Ok((expected.clone(), expected.clone()))
    );
    assert_eq!(
        parse(r#""administrator,policymaker""#),
        Ok((expected.clone(), expected.clone()))
    );
    assert_eq!(
        parse(r#"" administrator , policymaker ,""#),
        Ok((expected.clone(), expected))
    );
    assert_eq!(parse(r#""""#), Ok((vec![], vec![])));
    assert_eq!(parse("null"), Ok((vec![], vec![])));
    match parse("42") {
        Err(DefinitionsError::Parse {
            line: 1, reason, ..
        }) => assert_eq!(
            reason,
            "expected tags as an array of strings or a comma-separated string"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hand_written_users_may_give_a_plain_password() {
    let definitions = Definitions::from_json_str(
        r#"{"users": [
              {"name": "dev", "password": "dev-pass"},
              {"name": "dev512", "password": "p", "hashing_algorithm": "rabbit_password_hashing_sha512"}
            ],
            "permissions": [{"user": "dev", "vhost": "/", "configure": "", "write": ".*", "read": ".*"}]}"#,
    )
    .expect("parses");
    definitions.validate("/", &[]).expect("valid");
    let dev = definitions.users[0].credentials().expect("plain password");
    assert_eq!(dev.algorithm, HashingAlgorithm::Sha256);
    assert!(dev.verify("dev-pass"));
    let dev512 = definitions.users[1].credentials().expect("plain password");
    assert_eq!(dev512.algorithm, HashingAlgorithm::Sha512);
    assert!(dev512.verify("p"));
}

#[test]
fn duplicates_are_fine_and_existing_users_count() {
    let definitions = Definitions::from_json_str(
        r#"{"queues": [{"name": "q", "vhost": "/"}, {"name": "q", "vhost": "/", "durable": false}],
            "permissions": [{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}]}"#,
    )
    .expect("parses");
    definitions
        .validate("/", &["guest"])
        .expect("guest exists in the broker");
    assert_eq!(
        problems(definitions.validate("/", &[])),
        ["permission of user 'guest' in vhost '/' names user 'guest', which is neither declared \
          in the file nor an existing user"]
    );
}

#[test]
fn every_validation_problem_is_reported_at_once() {
    let text = format!(
        r#"{{
  "users": [
    {{"name": "", "password_hash": ""}},
    {{"name": "md4", "password_hash": "{hash}", "hashing_algorithm": "rabbit_password_hashing_md4"}},
    {{"name": "garbage", "password_hash": "not*base64"}},
    {{"name": "mismatch", "password_hash": "{hash}", "hashing_algorithm": "rabbit_password_hashing_md5"}},
    {{"name": "both", "password_hash": "{hash}", "password": "x"}},
    {{"name": "neither"}},
    {{"name": "typo", "password": "x", "hashing_algorithm": "sha256"}}
  ],
  "vhosts": [{{"name": "known"}}, {{"name": ""}}],
  "permissions": [
    {{"user": "ghost", "vhost": "nowhere", "configure": "(", "write": ".*", "read": "[z-a]"}}
  ],
  "queues": [
    {{"name": "", "vhost": "known"}},
    {{"name": "q", "vhost": "nowhere", "arguments": {{"x-max-length": 18446744073709551615}}}}
  ],
  "exchanges": [
    {{"name": "", "vhost": "/", "type": "direct"}},
    {{"name": "e", "vhost": "known", "type": "consistent-hash"}}
  ],
  "bindings": [
    {{"source": "e", "vhost": "nowhere", "destination": "q", "destination_type": "queue"}},
    {{"source": "", "vhost": "known", "destination": "q", "destination_type": "queue"}},
    {{"source": "missing", "vhost": "known", "destination": "absent", "destination_type": "exchange"}}
  ]
}}"#,
        hash = sha256_hash("x")
    );
    let definitions = Definitions::from_json_str(&text).expect("parses");
    let expected = [
        "a vhost has an empty name",
        "a user has an empty name",
        "user 'md4': unknown hashing algorithm 'rabbit_password_hashing_md4' (expected one of \
         rabbit_password_hashing_sha256, rabbit_password_hashing_sha512 or \
         rabbit_password_hashing_md5)",
        "user 'garbage': password hash is not valid base64: Invalid symbol 42, offset 3.",
        "user 'mismatch': password hash decodes to 36 bytes, but rabbit_password_hashing_md5 \
         hashes are 20 bytes (4-byte salt plus digest); is hashing_algorithm right?",
        "user 'both' has both 'password_hash' and 'password': give only one",
        "user 'neither' has neither 'password_hash' nor 'password' (use \"password_hash\": \"\" \
         for a user that cannot log in with a password)",
        "user 'typo': unknown hashing algorithm 'sha256' (expected one of \
         rabbit_password_hashing_sha256, rabbit_password_hashing_sha512 or \
         rabbit_password_hashing_md5)",
        "permission of user 'ghost' in vhost 'nowhere' names vhost 'nowhere', which is neither \
         declared in the file nor the default vhost '/'",
        "permission of user 'ghost' in vhost 'nowhere' names user 'ghost', which is neither \
         declared in the file nor an existing user",
        "permission of user 'ghost' in vhost 'nowhere': 'configure' pattern '(' is not a valid \
         regular expression: unclosed group",
        "permission of user 'ghost' in vhost 'nowhere': 'read' pattern '[z-a]' is not a valid \
         regular expression: invalid character class range, the start must be <= the end",
        "queue '' in vhost 'known' has an empty name (server-named queues cannot be pre-declared)",
        "queue 'q' in vhost 'nowhere' names vhost 'nowhere', which is neither declared in the \
         file nor the default vhost '/'",
        "queue 'q' in vhost 'nowhere': argument 'x-max-length' is an integer above \
         9223372036854775807, which no field value can hold",
        "exchange '' in vhost '/' has an empty name (the default exchange is built in and cannot \
         be declared)",
        "exchange 'e' in vhost 'known' has unknown type 'consistent-hash' (expected direct, \
         fanout, topic, headers or an x- plugin type)",
        "binding in vhost 'nowhere' from exchange 'e' to queue 'q' names vhost 'nowhere', which \
         is neither declared in the file nor the default vhost '/'",
        "binding in vhost 'known' from exchange '' to queue 'q': the default exchange's bindings \
         are implicit and cannot be declared",
        "binding in vhost 'known' from exchange '' to queue 'q': queue 'q' is not declared in \
         vhost 'known'",
        "binding in vhost 'known' from exchange 'missing' to exchange 'absent': exchange \
         'missing' is not declared in vhost 'known'",
        "binding in vhost 'known' from exchange 'missing' to exchange 'absent': exchange \
         'absent' is not declared in vhost 'known'",
    ];
    let found = problems(definitions.validate("/", &[]));
    for (index, (found, expected)) in found.iter().zip(expected).enumerate() {
        assert_eq!(found, expected, "problem {index}");
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn validation_errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("warren-definitions-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("invalid.json");
    std::fs::write(&path, r#"{"queues": [{"name": "q", "vhost": "other"}]}"#).expect("write");
    let definitions = Definitions::from_file(&path).expect("parses");
    assert_eq!(definitions.source.as_deref(), Some(path.as_path()));
    let error = definitions.validate("/", &[]).expect_err("unknown vhost");
    assert_eq!(
        error.to_string(),
        format!(
            "definitions file {}: 1 problem, nothing was applied:\n  - queue 'q' in vhost \
             'other' names vhost 'other', which is neither declared in the file nor the default \
             vhost '/'",
            path.display()
        )
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_json_names_path_line_and_column() {
    let dir = std::env::temp_dir().join(format!("warren-definitions-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    let broken = dir.join("broken.json");
    std::fs::write(
        &broken,
        "{\n  \"users\": [\n    {\"name\": \"a\",}\n  ]\n}\n",
    )
    .expect("write");
    let error = Definitions::from_file(&broken).expect_err("trailing comma");
    assert_eq!(
        error,
        DefinitionsError::Parse {
            path: Some(broken.clone()),
            line: 3,
            column: 18,
            reason: "trailing comma".into(),
        }
    );
    assert_eq!(
        error.to_string(),
        format!(
            "definitions file {}: line 3, column 18: trailing comma",
            broken.display()
        )
    );

    let missing = dir.join("missing.json");
    let error = Definitions::from_file(&missing).expect_err("no such file");
    assert!(
        error.to_string().starts_with(&format!(
            "cannot read definitions file {}: ",
            missing.display()
        )),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).ok();

    // Wrong types and missing fields are shape errors with a position too.
    let error = Definitions::from_json_str(
        "{\"queues\": [\n {\"name\": \"q\", \"vhost\": \"/\", \"durable\": \"yes\"}]}",
    )
    .expect_err("durable must be a bool");
    assert_eq!(
        error.to_string(),
        "definitions: line 2, column 45: invalid type: string \"yes\", expected a boolean"
    );
    let error = Definitions::from_json_str(r#"{"bindings": [{"source": "a", "vhost": "/", "destination": "b", "destination_type": "stream"}]}"#)
        .expect_err("unknown destination type");
    assert!(
        error
            .to_string()
            .contains("unknown variant `stream`, expected `queue` or `exchange`"),
        "{error}"
    );
    let error = Definitions::from_json_str(r#"{"exchanges": [{"name": "a", "vhost": "/"}]}"#)
        .expect_err("exchange type is required");
    assert!(
        error.to_string().contains("missing field `type`"),
        "{error}"
    );
    assert_eq!(
        Definitions::from_json_str("\n  []").map_err(|e| e.to_string()),
        Err("definitions: line 2, column 3: expected a JSON object of definitions sections".into())
    );
    assert!(matches!(
        Definitions::from_json_str(""),
        Err(DefinitionsError::Parse { line: 1, .. })
    ));
}
