//! The list verbs as a table: each rabbitmqctl `list_*` verb names its API endpoint, its
//! "Listing ..." line, its default columns and the columns it knows. `{vhost}` in a path is
//! the `-p` vhost, percent-encoded.

/// One list verb.
pub(super) struct ListVerb {
    /// The verb, as rabbitmqctl spells it.
    pub verb: &'static str,
    /// The line printed before the table ("vhost ..." gets the vhost's name).
    pub what: &'static str,
    /// The API path, with `{vhost}` for the `-p` vhost.
    pub path: &'static str,
    /// Columns shown when none are asked for.
    pub default_columns: &'static [&'static str],
    /// Every column the verb accepts.
    pub columns: &'static [&'static str],
}

/// The columns of both policy listings (all shown by default, as rabbitmqctl).
const POLICY_COLUMNS: &[&str] = &[
    "vhost",
    "name",
    "pattern",
    "apply-to",
    "definition",
    "priority",
];

/// Every list verb.
pub(super) const LIST_VERBS: &[ListVerb] = &[
    ListVerb {
        verb: "list_vhosts",
        what: "Listing vhosts ...",
        path: "/api/vhosts",
        default_columns: &["name"],
        columns: &[
            "name",
            "description",
            "tags",
            "default_queue_type",
            "tracing",
            "messages",
            "messages_ready",
            "messages_unacknowledged",
        ],
    },
    ListVerb {
        verb: "list_users",
        what: "Listing users ...",
        path: "/api/users",
        default_columns: &["user", "tags"],
        columns: &["user", "tags"],
    },
    ListVerb {
        verb: "list_permissions",
        what: "Listing permissions for vhost ...",
        path: "/api/vhosts/{vhost}/permissions",
        default_columns: &["user", "configure", "write", "read"],
        columns: &["user", "configure", "write", "read"],
    },
    ListVerb {
        verb: "list_policies",
        what: "Listing policies for vhost ...",
        path: "/api/policies/{vhost}",
        default_columns: POLICY_COLUMNS,
        columns: POLICY_COLUMNS,
    },
    ListVerb {
        verb: "list_operator_policies",
        what: "Listing policies for vhost ...",
        path: "/api/operator-policies/{vhost}",
        default_columns: POLICY_COLUMNS,
        columns: POLICY_COLUMNS,
    },
    ListVerb {
        verb: "list_queues",
        what: "Listing queues for vhost ...",
        path: "/api/queues/{vhost}",
        default_columns: &["name", "messages"],
        columns: &[
            "name",
            "vhost",
            "durable",
            "auto_delete",
            "exclusive",
            "arguments",
            "policy",
            "messages",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
            "type",
            "state",
        ],
    },
    ListVerb {
        verb: "list_exchanges",
        what: "Listing exchanges for vhost ...",
        path: "/api/exchanges/{vhost}",
        default_columns: &["name", "type"],
        columns: &[
            "name",
            "vhost",
            "type",
            "durable",
            "auto_delete",
            "internal",
            "arguments",
            "policy",
        ],
    },
    ListVerb {
        verb: "list_bindings",
        what: "Listing bindings for vhost ...",
        path: "/api/bindings/{vhost}",
        default_columns: &[
            "source_name",
            "source_kind",
            "destination_name",
            "destination_kind",
            "routing_key",
            "arguments",
        ],
        columns: &[
            "source_name",
            "source_kind",
            "destination_name",
            "destination_kind",
            "routing_key",
            "arguments",
            "vhost",
        ],
    },
    ListVerb {
        verb: "list_connections",
        what: "Listing connections ...",
        path: "/api/connections",
        default_columns: &["user", "peer_host", "peer_port", "state"],
        columns: &[
            "name",
            "protocol",
            "user",
            "vhost",
            "host",
            "port",
            "peer_host",
            "peer_port",
            "ssl",
            "state",
            "channels",
            "channel_max",
            "frame_max",
            "timeout",
            "client_properties",
            "connected_at",
            "user_provided_name",
            "connection_name",
        ],
    },
    ListVerb {
        verb: "list_channels",
        what: "Listing channels ...",
        path: "/api/channels",
        default_columns: &["name", "user", "number"],
        columns: &["name", "connection", "number", "user", "vhost", "state"],
    },
    ListVerb {
        verb: "list_consumers",
        what: "Listing consumers in vhost ...",
        path: "/api/consumers/{vhost}",
        default_columns: &[
            "queue_name",
            "channel_pid",
            "consumer_tag",
            "ack_required",
            "active",
            "arguments",
        ],
        columns: &[
            "queue_name",
            "channel_pid",
            "consumer_tag",
            "ack_required",
            "exclusive",
            "priority",
            "active",
            "activity_status",
            "arguments",
        ],
    },
    ListVerb {
        verb: "list_topic_permissions",
        what: "Listing topic permissions for vhost ...",
        path: "/api/vhosts/{vhost}/topic-permissions",
        default_columns: &["user", "exchange", "write", "read"],
        columns: &["user", "exchange", "write", "read"],
    },
    ListVerb {
        verb: "list_parameters",
        what: "Listing runtime parameters for vhost ...",
        path: "/api/parameters?vhost={vhost}",
        default_columns: &["component", "name", "value"],
        columns: &["component", "name", "value", "vhost"],
    },
    ListVerb {
        verb: "list_global_parameters",
        what: "Listing global runtime parameters ...",
        path: "/api/global-parameters",
        default_columns: &["name", "value"],
        columns: &["name", "value"],
    },
    ListVerb {
        verb: "list_stream_connections",
        what: "Listing stream connections ...",
        path: "/api/stream/connections/{vhost}",
        default_columns: &["conn_name"],
        columns: &[
            "conn_name",
            "port",
            "peer_port",
            "host",
            "peer_host",
            "user",
            "vhost",
            "subscriptions",
            "ssl",
            "connection_state",
            "heartbeat",
            "frame_max",
            "client_properties",
            "connected_at",
        ],
    },
    ListVerb {
        verb: "list_stream_consumers",
        what: "Listing stream consumers ...",
        path: "/api/stream/consumers/{vhost}",
        default_columns: STREAM_CONSUMER_COLUMNS,
        columns: STREAM_CONSUMER_COLUMNS,
    },
    ListVerb {
        verb: "list_stream_publishers",
        what: "Listing stream publishers ...",
        path: "/api/stream/publishers/{vhost}",
        default_columns: STREAM_PUBLISHER_COLUMNS,
        columns: STREAM_PUBLISHER_COLUMNS,
    },
];

/// `list_stream_consumers`' columns (rabbitmq-streams' `CONSUMER_INFO_ITEMS` but the
/// connection pid and node; all shown by default).
const STREAM_CONSUMER_COLUMNS: &[&str] = &[
    "conn_name",
    "subscription_id",
    "stream",
    "messages_consumed",
    "offset",
    "offset_lag",
    "credits",
    "active",
    "activity_status",
    "properties",
];

/// `list_stream_publishers`' columns (`PUBLISHER_INFO_ITEMS` but the pid and node).
const STREAM_PUBLISHER_COLUMNS: &[&str] = &[
    "conn_name",
    "publisher_id",
    "stream",
    "reference",
    "messages_published",
    "messages_confirmed",
    "messages_errored",
];
