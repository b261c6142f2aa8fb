//! `warrenctl`: rabbitmqctl's verbs and column syntax, carried out over the management HTTP
//! API of a running broker.
//!
//! [`run`] parses the arguments, sends the requests and returns the text to print, so the
//! binary is a thin wrapper and tests run verbs in-process against a test broker. Output is a
//! tab-separated table with a header row (rabbitmqctl's layout) or, with `--formatter json`, a
//! JSON array of objects with the selected columns.

mod listings;
mod parameters;
mod quorum;
mod streams;

use serde_json::{json, Map, Value as Json};

use crate::client::{ClientTls, HttpClient};
use crate::http::{percent_encode, ClientResponse};

/// Why a command failed, with the exit code rabbitmqctl uses for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtlError {
    /// What went wrong, for the user.
    pub message: String,
    /// 64 usage, 65 data error, 69 broker unavailable, 70 refused or failed.
    pub exit_code: i32,
}

impl CtlError {
    fn usage(message: impl Into<String>) -> CtlError {
        CtlError {
            message: message.into(),
            exit_code: 64,
        }
    }

    fn failed(message: impl Into<String>) -> CtlError {
        CtlError {
            message: message.into(),
            exit_code: 70,
        }
    }
}

impl std::fmt::Display for CtlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Error: {}", self.message)
    }
}

/// The usage text.
pub const USAGE: &str = "\
Usage: warrenctl [--host HOST] [--port PORT] [--username USER] [--password PASS]
                 [-p VHOST] [--formatter table|json] [-q] [-t|--timeout SECONDS]
                 [--tls [--cacert PEM] [--certfile PEM --keyfile PEM]] COMMAND [ARGS]

Commands (as rabbitmqctl):
  status                                   environment
  list_vhosts [COLUMN ...]                 add_vhost NAME | delete_vhost NAME
  list_users [COLUMN ...]                  add_user NAME PASSWORD | delete_user NAME
  change_password NAME PASSWORD            set_user_tags NAME [TAG ...]
  authenticate_user NAME PASSWORD
  list_permissions                         set_permissions USER CONF WRITE READ
  clear_permissions USER
  list_topic_permissions                   set_topic_permissions USER EXCHANGE WRITE READ
  clear_topic_permissions USER [EXCHANGE]
  list_parameters                          set_parameter COMPONENT NAME JSON
  clear_parameter COMPONENT NAME           list_global_parameters
  set_global_parameter NAME JSON           clear_global_parameter NAME
  list_policies | list_operator_policies
  set_policy [--priority N] [--apply-to WHAT] NAME PATTERN DEFINITION
  set_operator_policy [--priority N] [--apply-to WHAT] NAME PATTERN DEFINITION
  clear_policy NAME | clear_operator_policy NAME
  list_queues | list_exchanges | list_bindings | list_connections
  list_channels | list_consumers [COLUMN ...]
  purge_queue NAME                         delete_queue NAME [--if-empty] [--if-unused]
  close_connection CONNECTION_NAME REASON
  export_definitions PATH|-                import_definitions PATH|-
  trace_on | trace_off
  cluster_status                           forget_cluster_node NODE
  join_cluster NODE                        set_cluster_name NAME
  reset

Quorum queues (as rabbitmq-queues; VHOST defaults to -p):
  quorum_status [VHOST] QUEUE              check_if_node_is_quorum_critical
  add_member [VHOST] QUEUE NODE            delete_member [VHOST] QUEUE NODE
  grow NODE all|even [--vhost-pattern P] [--queue-pattern P]
  shrink NODE [--errors-only]              rebalance [quorum|all]
  transfer_leadership [VHOST] QUEUE NODE

Streams (as rabbitmq-streams; in -p's vhost):
  add_super_stream NAME [--partitions N | --binding-keys K1,K2 | --routing-keys K1,K2]
                   [--max-length-bytes SIZE] [--max-age ISO8601] [--stream-max-segment-size-bytes SIZE]
  delete_super_stream NAME
  list_stream_connections | list_stream_consumers | list_stream_publishers [COLUMN ...]

Defaults: --host localhost --port 15672 --username guest --password guest -p / --timeout 60
--tls speaks HTTPS (port 15671 by convention), checking the server's certificate against
--cacert (or the web PKI roots); --certfile/--keyfile present a client certificate.";

/// Connection and output options.
#[derive(Debug, Clone)]
struct Options {
    host: String,
    port: u16,
    username: String,
    password: String,
    vhost: String,
    json: bool,
    quiet: bool,
    priority: Option<i64>,
    apply_to: Option<String>,
    if_empty: bool,
    if_unused: bool,
    /// `grow --vhost-pattern`.
    vhost_pattern: Option<String>,
    /// `grow --queue-pattern`.
    queue_pattern: Option<String>,
    /// `shrink --errors-only`.
    errors_only: bool,
    timeout: std::time::Duration,
    tls: bool,
    cacert: Option<String>,
    certfile: Option<String>,
    keyfile: Option<String>,
}

/// Runs one warrenctl command given its arguments (without the program name) and returns
/// what to print. `stdin` is read for `import_definitions -`.
pub async fn run(args: &[String], stdin: Option<String>) -> Result<String, CtlError> {
    let mut options = Options {
        host: "localhost".into(),
        port: 15672,
        username: "guest".into(),
        password: "guest".into(),
        vhost: "/".into(),
        json: false,
        quiet: false,
        priority: None,
        apply_to: None,
        if_empty: false,
        if_unused: false,
        vhost_pattern: None,
        queue_pattern: None,
        errors_only: false,
        timeout: crate::client::DEFAULT_TIMEOUT,
        tls: false,
        cacert: None,
        certfile: None,
        keyfile: None,
    };
    let mut positional = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| {
            iter.next()
                .cloned()
                .ok_or_else(|| CtlError::usage(format!("{name} needs a value")))
        };
        match arg.as_str() {
            "--host" | "-n" => options.host = value(arg)?,
            "--port" => {
                options.port = value(arg)?
                    .parse()
                    .map_err(|_| CtlError::usage("--port needs a port number"))?
            }
            "--username" | "-u" => options.username = value(arg)?,
            "--password" => options.password = value(arg)?,
            "-p" | "--vhost" => options.vhost = value(arg)?,
            "--formatter" => match value(arg)?.as_str() {
                "json" => options.json = true,
                "table" | "tsv" => options.json = false,
                other => return Err(CtlError::usage(format!("unknown formatter '{other}'"))),
            },
            "-q" | "--quiet" | "-s" | "--silent" => options.quiet = true,
            "--priority" => {
                options.priority = Some(
                    value(arg)?
                        .parse()
                        .map_err(|_| CtlError::usage("--priority needs an integer"))?,
                )
            }
            "--apply-to" => options.apply_to = Some(value(arg)?),
            "--if-empty" => options.if_empty = true,
            "--if-unused" => options.if_unused = true,
            "--vhost-pattern" => options.vhost_pattern = Some(value(arg)?),
            "--queue-pattern" => options.queue_pattern = Some(value(arg)?),
            "--errors-only" => options.errors_only = true,
            "-t" | "--timeout" => {
                let seconds: f64 = value(arg)?
                    .parse()
                    .ok()
                    .filter(|seconds: &f64| seconds.is_finite() && *seconds > 0.0)
                    .ok_or_else(|| {
                        CtlError::usage("--timeout needs a positive number of seconds")
                    })?;
                options.timeout = std::time::Duration::from_secs_f64(seconds);
            }
            "--tls" | "--use-tls" | "--ssl" => options.tls = true,
            "--cacert" | "--ssl-ca-cert-file" => options.cacert = Some(value(arg)?),
            "--certfile" | "--ssl-cert-file" => options.certfile = Some(value(arg)?),
            "--keyfile" | "--ssl-key-file" => options.keyfile = Some(value(arg)?),
            "-h" | "--help" | "help" => return Ok(USAGE.to_string()),
            _ => positional.push(arg.clone()),
        }
    }
    let Some((command, rest)) = positional.split_first() else {
        return Err(CtlError::usage(USAGE));
    };
    let client = client_for(&options)?;
    let ctl = Ctl { options, client };
    // The topic permission and parameter verbs are dispatched apart, as a boxed future:
    // inlining their state into `command`'s would grow every verb's future (debug builds
    // then overflow a test thread's stack).
    if let Some(result) = ctl.parameter_command(command, rest).await {
        return result;
    }
    if let Some(result) = ctl.quorum_command(command, rest).await {
        return result;
    }
    if let Some(result) = ctl.stream_command(command, rest).await {
        return result;
    }
    ctl.command(command, rest, stdin).await
}

/// The HTTP client the options ask for.
fn client_for(options: &Options) -> Result<HttpClient, CtlError> {
    let client = HttpClient::new(&options.host, options.port).with_timeout(options.timeout);
    if !options.tls {
        if options.cacert.is_some() || options.certfile.is_some() || options.keyfile.is_some() {
            return Err(CtlError::usage(
                "--cacert, --certfile and --keyfile need --tls",
            ));
        }
        return Ok(client);
    }
    let client_certificate = match (&options.certfile, &options.keyfile) {
        (Some(certfile), Some(keyfile)) => Some((
            std::path::Path::new(certfile),
            std::path::Path::new(keyfile),
        )),
        (None, None) => None,
        _ => return Err(CtlError::usage("--certfile and --keyfile go together")),
    };
    let tls = ClientTls {
        cacertfile: options.cacert.as_deref().map(std::path::Path::new),
        client_certificate,
    };
    client.with_tls(&tls).map_err(|reason| CtlError {
        message: format!("TLS: {reason}"),
        exit_code: 64,
    })
}

struct Ctl {
    options: Options,
    client: HttpClient,
}

/// A list command's endpoint, default columns and the columns rabbitmqctl knows.
struct Listing {
    what: &'static str,
    path: String,
    default_columns: &'static [&'static str],
    columns: &'static [&'static str],
}

impl Ctl {
    fn addr(&self) -> String {
        self.client.addr()
    }

    fn vhost(&self) -> String {
        percent_encode(&self.options.vhost)
    }

    async fn request_as(
        &self,
        method: &str,
        path: &str,
        credentials: (&str, &str),
        headers: &[(&str, &str)],
        body: Option<&Json>,
    ) -> Result<ClientResponse, CtlError> {
        let body = body.map(Json::to_string);
        self.client
            .request(
                method,
                path,
                Some(credentials),
                headers,
                body.as_deref().map(str::as_bytes),
            )
            .await
            .map_err(|e| CtlError {
                message: format!(
                    "unable to connect to the management API at {}: {e}",
                    self.addr()
                ),
                exit_code: 69,
            })
    }

    /// Sends a request as the configured user; an error status becomes an error with the
    /// API's reason.
    async fn call(&self, method: &str, path: &str, body: Option<&Json>) -> Result<Json, CtlError> {
        self.call_with(method, path, &[], body).await
    }

    async fn call_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Json>,
    ) -> Result<Json, CtlError> {
        let credentials = (
            self.options.username.as_str(),
            self.options.password.as_str(),
        );
        let response = self
            .request_as(method, path, credentials, headers, body)
            .await?;
        if response.status >= 400 {
            let json = response.json();
            let reason = json["reason"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| response.text());
            return Err(CtlError::failed(format!(
                "{} {path}: {} ({})",
                method, reason, response.status
            )));
        }
        Ok(response.json())
    }

    fn banner(&self, text: String) -> String {
        if self.options.quiet || self.options.json {
            String::new()
        } else {
            text + "\n"
        }
    }

    async fn command(
        &self,
        command: &str,
        args: &[String],
        stdin: Option<String>,
    ) -> Result<String, CtlError> {
        let arg = |index: usize, name: &str| {
            args.get(index)
                .cloned()
                .ok_or_else(|| CtlError::usage(format!("{command}: missing {name}")))
        };
        let vhost = self.vhost();
        if let Some(verb) = listings::LIST_VERBS.iter().find(|v| v.verb == command) {
            let listing = Listing {
                what: verb.what,
                path: verb.path.replace("{vhost}", &vhost),
                default_columns: verb.default_columns,
                columns: verb.columns,
            };
            return self.list(listing, args).await;
        }
        let done = |text: String| Ok(self.banner(text));
        match command {
            "status" => self.status().await,
            "cluster_status" => self.cluster_status().await,
            "forget_cluster_node" => {
                let node = arg(0, "node name")?;
                self.call(
                    "DELETE",
                    &format!("/api/cluster-nodes/{}", percent_encode(&node)),
                    None,
                )
                .await?;
                done(format!("Removing node {node} from the cluster ..."))
            }
            "join_cluster" => {
                // RabbitMQ's join_cluster needs stop_app first; here the node restarts
                // itself (wiping its data) once it has checked it can reach NODE.
                let node = arg(0, "node name (warren@HOST or warren@HOST:PORT)")?;
                let answer = self
                    .call("POST", "/api/join-cluster", Some(&json!({"node": node})))
                    .await?;
                if answer["already_member"] == true {
                    return done(format!(
                        "Node {} is already a member of the cluster of {node}",
                        answer["node"].as_str().unwrap_or("")
                    ));
                }
                done(format!(
                    "Clustering node {} with {node}: it resets and restarts to join ...",
                    answer["node"].as_str().unwrap_or("")
                ))
            }
            "reset" => {
                // RabbitMQ's reset needs stop_app first; here the node leaves its cluster,
                // restarts and empties its data_dir.
                let answer = self.call("POST", "/api/reset", None).await?;
                done(format!(
                    "Resetting node {}: it leaves its cluster and restarts blank ...",
                    answer["node"].as_str().unwrap_or("")
                ))
            }
            "set_cluster_name" => {
                let name = arg(0, "cluster name")?;
                self.call(
                    "PUT",
                    "/api/global-parameters/cluster_name",
                    Some(&json!({"name": "cluster_name", "value": name})),
                )
                .await?;
                done(format!("Setting cluster name to {name} ..."))
            }
            "environment" => self.environment().await,
            "add_vhost" => {
                let name = arg(0, "vhost name")?;
                self.call(
                    "PUT",
                    &format!("/api/vhosts/{}", percent_encode(&name)),
                    Some(&json!({})),
                )
                .await?;
                done(format!("Adding vhost \"{name}\" ..."))
            }
            "delete_vhost" => {
                let name = arg(0, "vhost name")?;
                self.call(
                    "DELETE",
                    &format!("/api/vhosts/{}", percent_encode(&name)),
                    None,
                )
                .await?;
                done(format!("Deleting vhost \"{name}\" ..."))
            }
            "add_user" => {
                let (name, password) = (arg(0, "user name")?, arg(1, "password")?);
                let path = format!("/api/users/{}", percent_encode(&name));
                let credentials = (
                    self.options.username.as_str(),
                    self.options.password.as_str(),
                );
                if self
                    .request_as("GET", &path, credentials, &[], None)
                    .await?
                    .status
                    == 200
                {
                    return Err(CtlError::failed(format!("user \"{name}\" already exists")));
                }
                self.call(
                    "PUT",
                    &path,
                    Some(&json!({"password": password, "tags": ""})),
                )
                .await?;
                done(format!("Adding user \"{name}\" ..."))
            }
            "delete_user" => {
                let name = arg(0, "user name")?;
                self.call(
                    "DELETE",
                    &format!("/api/users/{}", percent_encode(&name)),
                    None,
                )
                .await?;
                done(format!("Deleting user \"{name}\" ..."))
            }
            "change_password" => {
                let (name, password) = (arg(0, "user name")?, arg(1, "password")?);
                let path = format!("/api/users/{}", percent_encode(&name));
                let user = self.call("GET", &path, None).await?;
                self.call(
                    "PUT",
                    &path,
                    Some(&json!({"password": password, "tags": user["tags"]})),
                )
                .await?;
                done(format!("Changing password for user \"{name}\" ..."))
            }
            "set_user_tags" => {
                let name = arg(0, "user name")?;
                let tags: Vec<&String> = args[1..].iter().collect();
                let path = format!("/api/users/{}", percent_encode(&name));
                let user = self.call("GET", &path, None).await?;
                self.call(
                    "PUT",
                    &path,
                    Some(&json!({
                        "password_hash": user["password_hash"],
                        "hashing_algorithm": user["hashing_algorithm"],
                        "tags": tags,
                    })),
                )
                .await?;
                done(format!("Setting tags for user \"{name}\" to {tags:?} ..."))
            }
            "authenticate_user" => {
                let (name, password) = (arg(0, "user name")?, arg(1, "password")?);
                let response = self
                    .request_as("GET", "/api/whoami", (&name, &password), &[], None)
                    .await?;
                // A user without management tags logs in but is refused the API (401 with a
                // reason other than a failed login): the credentials are valid.
                let valid = response.status == 200
                    || (response.status == 401 && response.json()["reason"] != "Login failed");
                if valid {
                    Ok(format!(
                        "{}Success\n",
                        self.banner(format!("Authenticating user \"{name}\" ..."))
                    ))
                } else {
                    Err(CtlError {
                        message: format!("failed to authenticate user \"{name}\""),
                        exit_code: 65,
                    })
                }
            }
            "set_permissions" => {
                let user = arg(0, "user name")?;
                let body = json!({
                    "configure": arg(1, "configure pattern")?,
                    "write": arg(2, "write pattern")?,
                    "read": arg(3, "read pattern")?,
                });
                self.call(
                    "PUT",
                    &format!("/api/permissions/{vhost}/{}", percent_encode(&user)),
                    Some(&body),
                )
                .await?;
                done(format!(
                    "Setting permissions for user \"{user}\" in vhost \"{}\" ...",
                    self.options.vhost
                ))
            }
            "clear_permissions" => {
                let user = arg(0, "user name")?;
                self.call(
                    "DELETE",
                    &format!("/api/permissions/{vhost}/{}", percent_encode(&user)),
                    None,
                )
                .await?;
                done(format!(
                    "Clearing permissions for user \"{user}\" in vhost \"{}\" ...",
                    self.options.vhost
                ))
            }
            "set_policy" | "set_operator_policy" => {
                let (name, pattern, definition) =
                    (arg(0, "name")?, arg(1, "pattern")?, arg(2, "definition")?);
                let definition: Json = serde_json::from_str(&definition).map_err(|e| CtlError {
                    message: format!("the policy definition is not valid JSON: {e}"),
                    exit_code: 65,
                })?;
                let kind = if command == "set_policy" {
                    "policies"
                } else {
                    "operator-policies"
                };
                let mut body = json!({
                    "pattern": pattern,
                    "definition": definition,
                    "priority": self.options.priority.unwrap_or(0),
                });
                if let Some(apply_to) = &self.options.apply_to {
                    body["apply-to"] = json!(apply_to);
                }
                self.call(
                    "PUT",
                    &format!("/api/{kind}/{vhost}/{}", percent_encode(&name)),
                    Some(&body),
                )
                .await?;
                done(format!(
                    "Setting policy \"{name}\" for pattern \"{pattern}\" to \"{definition}\" with priority \"{}\" for vhost \"{}\" ...",
                    self.options.priority.unwrap_or(0),
                    self.options.vhost
                ))
            }
            "clear_policy" | "clear_operator_policy" => {
                let name = arg(0, "name")?;
                let kind = if command == "clear_policy" {
                    "policies"
                } else {
                    "operator-policies"
                };
                self.call(
                    "DELETE",
                    &format!("/api/{kind}/{vhost}/{}", percent_encode(&name)),
                    None,
                )
                .await?;
                done(format!(
                    "Clearing policy \"{name}\" on vhost \"{}\" ...",
                    self.options.vhost
                ))
            }
            "purge_queue" => {
                let name = arg(0, "queue name")?;
                self.call(
                    "DELETE",
                    &format!("/api/queues/{vhost}/{}/contents", percent_encode(&name)),
                    None,
                )
                .await?;
                done(format!(
                    "Purging queue '{name}' in vhost '{}' ...",
                    self.options.vhost
                ))
            }
            "delete_queue" => {
                let name = arg(0, "queue name")?;
                let mut query = Vec::new();
                if self.options.if_empty {
                    query.push("if-empty=true");
                }
                if self.options.if_unused {
                    query.push("if-unused=true");
                }
                let query = if query.is_empty() {
                    String::new()
                } else {
                    format!("?{}", query.join("&"))
                };
                self.call(
                    "DELETE",
                    &format!("/api/queues/{vhost}/{}{query}", percent_encode(&name)),
                    None,
                )
                .await?;
                done(format!(
                    "Deleting queue '{name}' on vhost '{}' ...",
                    self.options.vhost
                ))
            }
            "close_connection" => {
                let (name, reason) = (arg(0, "connection name")?, arg(1, "reason")?);
                self.call_with(
                    "DELETE",
                    &format!("/api/connections/{}", percent_encode(&name)),
                    &[("x-reason", reason.as_str())],
                    None,
                )
                .await?;
                done(format!("Closing connection {name}, reason: {reason}..."))
            }
            "export_definitions" => {
                let path = arg(0, "path (or - for standard output)")?;
                let definitions = self.call("GET", "/api/definitions", None).await?;
                let text = serde_json::to_string_pretty(&definitions).unwrap_or_default();
                if path == "-" {
                    return Ok(text + "\n");
                }
                std::fs::write(&path, text + "\n").map_err(|e| CtlError {
                    message: format!("cannot write {path}: {e}"),
                    exit_code: 73,
                })?;
                done(format!(
                    "Exporting definitions in JSON to a file at \"{path}\" ..."
                ))
            }
            "import_definitions" => {
                let path = arg(0, "path (or - for standard input)")?;
                let text = if path == "-" {
                    stdin.unwrap_or_default()
                } else {
                    std::fs::read_to_string(&path).map_err(|e| CtlError {
                        message: format!("cannot read {path}: {e}"),
                        exit_code: 66,
                    })?
                };
                let definitions: Json = serde_json::from_str(&text).map_err(|e| CtlError {
                    message: format!("{path} is not valid JSON: {e}"),
                    exit_code: 65,
                })?;
                self.call("POST", "/api/definitions", Some(&definitions))
                    .await?;
                done(format!(
                    "Importing definitions in JSON from a file at \"{path}\" ..."
                ))
            }
            "trace_on" | "trace_off" => {
                let on = command == "trace_on";
                let path = format!("/api/vhosts/{vhost}");
                self.call("GET", &path, None).await?;
                self.call("PUT", &path, Some(&json!({ "tracing": on })))
                    .await?;
                done(format!(
                    "{} tracing for vhost \"{}\" ...",
                    if on { "Starting" } else { "Stopping" },
                    self.options.vhost
                ))
            }
            other => Err(CtlError::usage(format!(
                "unknown command '{other}'\n\n{USAGE}"
            ))),
        }
    }

    async fn list(&self, listing: Listing, requested: &[String]) -> Result<String, CtlError> {
        let columns: Vec<&str> = if requested.is_empty() {
            listing.default_columns.to_vec()
        } else {
            requested.iter().map(String::as_str).collect()
        };
        if let Some(bad) = columns.iter().find(|c| !listing.columns.contains(c)) {
            return Err(CtlError::usage(format!(
                "info key '{bad}' is not supported; valid keys: {}",
                listing.columns.join(", ")
            )));
        }
        let rows = self.call("GET", &listing.path, None).await?;
        let rows = rows.as_array().cloned().unwrap_or_default();
        let selected: Vec<Vec<(String, Json)>> = rows
            .iter()
            .map(|row| {
                columns
                    .iter()
                    .map(|c| (c.to_string(), column(row, c)))
                    .collect()
            })
            .collect();
        if self.options.json {
            let array: Vec<Json> = selected
                .into_iter()
                .map(|row| Json::Object(row.into_iter().collect::<Map<String, Json>>()))
                .collect();
            return Ok(
                serde_json::to_string_pretty(&Json::Array(array)).unwrap_or_default() + "\n",
            );
        }
        let what = listing
            .what
            .replace("vhost ...", &format!("vhost {} ...", self.options.vhost));
        let mut out = self.banner(what);
        out.push_str(&columns.join("\t"));
        out.push('\n');
        for row in selected {
            let cells: Vec<String> = row.iter().map(|(_, value)| cell(value)).collect();
            out.push_str(&cells.join("\t"));
            out.push('\n');
        }
        Ok(out)
    }

    async fn cluster_status(&self) -> Result<String, CtlError> {
        let status = self.call("GET", "/api/cluster-status", None).await?;
        if self.options.json {
            return Ok(status.to_string() + "\n");
        }
        let mut out = self.banner(format!(
            "Cluster status of node {} ...",
            status["node"].as_str().unwrap_or("")
        ));
        out.push_str("Basics\n\n");
        out.push_str(&format!(
            "Cluster name: {}\n",
            cell(&status["cluster_name"])
        ));
        out.push_str(&format!("Cluster id: {}\n", cell(&status["cluster_id"])));
        out.push_str(&format!("Leader: {}\n", cell(&status["leader"])));
        let members = status["members"].as_array().cloned().unwrap_or_default();
        let names = |filter: &dyn Fn(&Json) -> bool| -> Vec<String> {
            members
                .iter()
                .filter(|m| filter(m))
                .map(|m| m["name"].as_str().unwrap_or("").to_string())
                .collect()
        };
        out.push_str("\nDisk Nodes\n\n");
        for name in names(&|_| true) {
            out.push_str(&format!("{name}\n"));
        }
        out.push_str("\nRunning Nodes\n\n");
        for name in names(&|m| m["running"].as_bool() == Some(true)) {
            out.push_str(&format!("{name}\n"));
        }
        out.push_str("\nMetadata voters\n\n");
        for name in names(&|m| m["type"].as_str() == Some("voter")) {
            out.push_str(&format!("{name}\n"));
        }
        Ok(out)
    }

    async fn status(&self) -> Result<String, CtlError> {
        let overview = self.call("GET", "/api/overview", None).await?;
        let nodes = self.call("GET", "/api/nodes", None).await?;
        let node = nodes.get(0).cloned().unwrap_or(Json::Null);
        if self.options.json {
            return Ok(json!({"overview": overview, "node": node}).to_string() + "\n");
        }
        let mut out = self.banner(format!(
            "Status of node {} ...",
            overview["node"].as_str().unwrap_or("")
        ));
        let line = |out: &mut String, key: &str, value: &Json| {
            out.push_str(&format!("{key}: {}\n", cell(value)));
        };
        line(&mut out, "Product name", &overview["product_name"]);
        line(&mut out, "Product version", &overview["product_version"]);
        line(
            &mut out,
            "RabbitMQ compatibility",
            &overview["rabbitmq_version"],
        );
        line(&mut out, "Node", &overview["node"]);
        line(&mut out, "Cluster name", &overview["cluster_name"]);
        line(&mut out, "Uptime (ms)", &node["uptime"]);
        line(&mut out, "Memory used", &node["mem_used"]);
        line(&mut out, "Memory high watermark", &node["mem_limit"]);
        line(&mut out, "Free disk space", &node["disk_free"]);
        line(
            &mut out,
            "Free disk space low watermark",
            &node["disk_free_limit"],
        );
        let alarms: Vec<&str> = [("memory", "mem_alarm"), ("disk", "disk_free_alarm")]
            .iter()
            .filter(|(_, key)| node[*key] == true)
            .map(|(name, _)| *name)
            .collect();
        out.push_str(&format!(
            "Alarms: {}\n",
            if alarms.is_empty() {
                "(none)".to_string()
            } else {
                alarms.join(", ")
            }
        ));
        for (key, value) in overview["object_totals"].as_object().into_iter().flatten() {
            out.push_str(&format!("Total {key}: {}\n", cell(value)));
        }
        out.push_str("Listeners:\n");
        for listener in overview["listeners"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  interface: {}, port: {}, protocol: {}\n",
                cell(&listener["ip_address"]),
                cell(&listener["port"]),
                cell(&listener["protocol"])
            ));
        }
        Ok(out)
    }

    async fn environment(&self) -> Result<String, CtlError> {
        let overview = self.call("GET", "/api/overview", None).await?;
        let nodes = self.call("GET", "/api/nodes", None).await?;
        let node = nodes.get(0).cloned().unwrap_or(Json::Null);
        let environment = json!({
            "node": overview["node"],
            "cluster_name": overview["cluster_name"],
            "product_version": overview["product_version"],
            "listeners": overview["listeners"],
            "vm_memory_high_watermark_bytes": node["mem_limit"],
            "disk_free_limit_bytes": node["disk_free_limit"],
            "enabled_plugins": node["enabled_plugins"],
        });
        if self.options.json {
            return Ok(environment.to_string() + "\n");
        }
        let mut out = self.banner("Application environment of node ...".to_string());
        for (key, value) in environment.as_object().into_iter().flatten() {
            out.push_str(&format!("{key}: {}\n", cell(value)));
        }
        Ok(out)
    }
}

/// A rabbitmqctl column read from the API's JSON for that object.
fn column(row: &Json, name: &str) -> Json {
    match name {
        "user" if row.get("name").is_some() && row.get("user").is_none() => row["name"].clone(),
        "source_name" => row["source"].clone(),
        "source_kind" => json!("exchange"),
        "destination_name" => row["destination"].clone(),
        "destination_kind" => row["destination_type"].clone(),
        "connection" => row["connection_details"]["name"].clone(),
        // The stream verbs' columns (rabbitmq-streams' names for the API's fields).
        "conn_name" if row.get("connection_details").is_some() => {
            row["connection_details"]["name"].clone()
        }
        "conn_name" => row["name"].clone(),
        "stream" => row["queue"]["name"].clone(),
        "messages_consumed" => row["consumed"].clone(),
        "messages_published" => row["published"].clone(),
        "messages_confirmed" => row["confirmed"].clone(),
        "messages_errored" => row["errored"].clone(),
        "heartbeat" => row["timeout"].clone(),
        "connection_state" => row["state"].clone(),
        "queue_name" => row["queue"]["name"].clone(),
        "channel_pid" => row["channel_details"]["connection_name"].clone(),
        other => row.get(other).cloned().unwrap_or(Json::Null),
    }
}

/// A table cell: strings bare, tags as `[a, b]`, objects as JSON, null empty.
fn cell(value: &Json) -> String {
    match value {
        Json::Null => String::new(),
        Json::String(text) => text.clone(),
        Json::Array(items) if items.iter().all(Json::is_string) => format!(
            "[{}]",
            items
                .iter()
                .filter_map(Json::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_render_as_rabbitmqctl_prints_them() {
        assert_eq!(
            cell(&json!(["administrator", "monitoring"])),
            "[administrator, monitoring]"
        );
        assert_eq!(cell(&json!("q")), "q");
        assert_eq!(cell(&json!(3)), "3");
        assert_eq!(cell(&json!({"x-max-length": 1})), "{\"x-max-length\":1}");
        assert_eq!(cell(&Json::Null), "");
    }

    #[test]
    fn columns_map_rabbitmqctl_names_to_api_fields() {
        let binding = json!({"source": "x", "destination": "q", "destination_type": "queue"});
        assert_eq!(column(&binding, "source_name"), "x");
        assert_eq!(column(&binding, "destination_kind"), "queue");
        assert_eq!(column(&json!({"name": "bob", "tags": []}), "user"), "bob");
    }

    #[tokio::test]
    async fn usage_errors_need_no_broker() {
        let error = run(&["list_queues".into(), "nope".into()], None)
            .await
            .unwrap_err();
        assert_eq!(error.exit_code, 64);
        assert!(error.message.contains("'nope'"), "{}", error.message);
        assert_eq!(run(&[], None).await.unwrap_err().exit_code, 64);
        assert!(run(&["--help".into()], None)
            .await
            .unwrap()
            .starts_with("Usage"));
    }
}
