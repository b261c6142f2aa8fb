//! Command-line parsing: a small hand-written parser (no clap, to keep the build lean) with
//! PerfTest-like flag names, and AMQP URI parsing.

use std::fmt;

pub const USAGE: &str = "\
warren-perf: a load tool for AMQP 0-9-1 and MQTT brokers (Warren, RabbitMQ, Mosquitto), in the
spirit of PerfTest

USAGE: warren-perf [OPTIONS]

Connection:
  --uri URI                 amqp://user:pass@host:port/vhost
                            (default amqp://guest:guest@127.0.0.1:5672/%2f);
                            mqtt://user:pass@host:port for the --mqtt-* modes (port 1883),
                            stomp://user:pass@host:port/vhost for --stomp-queue (port 61613),
                            amqp10://user:pass@host:port/vhost for --amqp10-queue (port 5672)
  --consumer-uri URI        AMQP 0-9-1 consumers connect here instead (another cluster node)
Topology:
  -u, --queue NAME          queue name (default perf-test); declared non-durable, deleted at the end
      --durable             declare the queues durable (for persistent-message benchmarks)
      --keep                neither purge the queues at the start nor delete them at the end
                            (fill a backlog with -y 0, drain it in a later run with -x 0)
      --queues N            spread producers/consumers over N queues NAME-1..NAME-N (default 1)
  -t, --type TYPE           exchange type: direct, fanout, topic or headers
  -e, --exchange NAME       exchange to declare and publish to (default: the default exchange,
                            or warren-perf-TYPE when only --type is given)
  -k, --routing-key KEY     routing key (default: the queue name; \"\" for fanout)
      --topic-bindings N    topic: bind each queue with N distinct patterns (default 1)
      --queue-arg K=V       queue argument for the declarations, repeatable (integers are
                            sent as longs, true/false as booleans, anything else as strings),
                            e.g. --queue-arg x-message-ttl=60000 --queue-arg x-max-priority=10
      --priorities N        messages cycle through priorities 0..N-1
      --expirations MS,..   messages cycle through these per-message TTLs (expiration)
Load:
  -x, --producers N         producers, one connection each (default 1)
  -y, --consumers N         consumers, one connection each (default 1)
  -s, --size BYTES          message body size (default 16)
  -f, --flag persistent     publish persistent messages (delivery_mode 2)
  -c, --confirm WINDOW      publisher confirms, at most WINDOW unconfirmed messages per producer
  -q, --qos PREFETCH        consumer prefetch count (default 0 = unlimited)
  -a, --autoack             consume with no_ack (default: manual acks, multiple=true)
      --multi-ack-every N   manual ack: ack (multiple) at least every N deliveries
                            (default qos/2, or 1000 without qos); also whenever a read is drained
  -r, --rate MSGS_PER_SEC   publishing rate per producer (default 0 = unlimited);
                            with --mqtt-fan-in the total rate of all publishers
  -C, --pmessages N         messages each producer sends, then it stops (default 0 = no limit)
  -z, --time SECONDS        run time (default 0 = until Ctrl-C)
      --latency             put a timestamp in each body; report latency percentiles
      --batch N             most messages a producer writes per socket write (default 500)
Modes:
      --rpc                 one message in flight: publish, consume it, publish the next
      --idle-connections N  open N connections with one channel each, hold them for --time
      --churn               open a connection and a channel, close it, repeat (-x loops)
      --handshake-batch N   --idle-connections: handshakes in flight at once (default 100,
                            below the usual listen backlog of 128)
MQTT 3.1.1 modes (with an mqtt:// --uri):
      --mqtt-idle N         open N connections, each subscribed QoS 1 to its own topic, hold
                            them for --time; reports connections/s and broker RSS
      --mqtt-fan-in         -x publishers (QoS 0) on devices/I/telemetry, one subscriber on
                            devices/+/telemetry; reports delivered msgs/s
      --mqtt-qos1           one QoS 1 publisher (-c in-flight window, default 100) and one
                            QoS 1 subscriber; reports delivered msgs/s
      --source-addrs N      spread connections over source addresses 127.0.0.1..127.0.0.N
                            (past the ephemeral-port limit of one address; default 1)
      --mqtt5               speak MQTT 5.0 instead of 3.1.1 (the QoS 1 window is capped at
                            the broker's CONNACK receive maximum)
      --websocket PATH      --mqtt-idle over WebSocket (Web-MQTT, subprotocol mqtt) at PATH
                            (e.g. /ws) on the --uri's host and port
STOMP 1.2 mode (with a stomp:// --uri):
      --stomp-queue         one producer and one consumer on /queue/NAME (-u), the consumer
                            with client-individual acks and -q prefetch (default 200), the
                            producer asking a receipt every tenth of -c (default 1000)
Stream protocol mode (with a stream:// --uri, port 5552):
      --stream-queue        (re)creates stream NAME (-u), one producer publishing batches of 100
                            with at most -c unconfirmed (default 10000), one consumer from first
AMQP 1.0 mode (with an amqp10:// --uri; the queue is declared over AMQP 0-9-1 first):
      --amqp10-queue        one sender link to /queues/NAME (-u), unsettled, at most -c
                            unsettled transfers (default 1000) within its link credit, and one
                            receiver link from it with credit -q (default 200) topped up as
                            deliveries are accepted
      --amqp10-address-v1   use the RabbitMQ 3.x plugin's v1 address /amq/queue/NAME
      --amqp10-settled      both links pre-settled (snd-settle-mode settled): no dispositions,
                            -c does not apply
      --no-nodelay          leave Nagle's algorithm on (no TCP_NODELAY), as fe2o3-amqp's
                            Connection::open does; with --batch 1 one transfer per write
      --amqp10-fe2o3        drive both links with the fe2o3-amqp client (its default
                            Connection::open, so Nagle on; credit -q; each send awaited)
Other:
      --broker-pid PID      report the broker's CPU time (from /proc/PID/stat) per message
      --threads N           tokio worker threads (default: number of CPUs)
  -h, --help                this text
";

/// Exchange types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeType {
    Direct,
    Fanout,
    Topic,
    Headers,
}

impl ExchangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Topic => "topic",
            ExchangeType::Headers => "headers",
        }
    }
}

/// The protocol of a URI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Amqp,
    Mqtt,
    Stomp,
    Amqp10,
    Stream,
}

/// Where to connect and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub vhost: String,
}

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Throughput,
    Rpc,
    Idle(usize),
    Churn,
    MqttIdle(usize),
    MqttFanIn,
    MqttQos1,
    StompQueue,
    Amqp10Queue,
    StreamQueue,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub uri: Uri,
    /// Where consumers connect, when not to `uri` (another node of a cluster).
    pub consumer_uri: Option<Uri>,
    pub producers: usize,
    pub consumers: usize,
    pub queue: String,
    pub queues: usize,
    pub exchange_type: Option<ExchangeType>,
    pub exchange: Option<String>,
    pub topic_bindings: usize,
    pub routing_key: Option<String>,
    pub size: usize,
    pub persistent: bool,
    /// Declare queues durable.
    pub durable: bool,
    /// Keep the queues' messages: no purge at the start, no delete at the end.
    pub keep: bool,
    pub confirm: Option<usize>,
    pub qos: u16,
    pub autoack: bool,
    pub multi_ack_every: Option<usize>,
    pub rate: u64,
    /// `-C`: messages each producer sends before it stops (0 = no limit).
    pub producer_messages: u64,
    pub time: f64,
    pub latency: bool,
    pub batch: usize,
    pub mode: Mode,
    pub broker_pid: Option<u32>,
    pub threads: Option<usize>,
    pub handshake_batch: usize,
    /// `--queue-arg KEY=VALUE`: x-arguments for the queue declarations.
    pub queue_args: Vec<(String, String)>,
    /// `--priorities N`: messages cycle through priorities 0..N (0 = no priority property).
    pub priorities: u8,
    /// `--expirations MS,MS,...`: messages cycle through these per-message TTLs.
    pub expirations: Vec<u64>,
    /// `--source-addrs N`: connections are bound to 127.0.0.1..127.0.0.N in turn.
    pub source_addrs: u8,
    /// `--amqp10-address-v1`: link to `/amq/queue/NAME` instead of `/queues/NAME`.
    pub amqp10_address_v1: bool,
    /// `--amqp10-settled`: both AMQP 1.0 links pre-settled.
    pub amqp10_settled: bool,
    /// `--amqp10-fe2o3`: drive the links with the fe2o3-amqp client instead of the tool's own.
    pub amqp10_fe2o3: bool,
    /// `false` with `--no-nodelay`: AMQP 1.0 sockets keep Nagle's algorithm on.
    pub nodelay: bool,
    /// `--mqtt5`: the `--mqtt-*` modes speak MQTT 5.0 instead of 3.1.1.
    pub mqtt5: bool,
    /// `--websocket PATH`: `--mqtt-idle` connects over WebSocket (Web-MQTT) at this path.
    pub websocket: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            uri: parse_uri(DEFAULT_URI).expect("the default URI parses"),
            consumer_uri: None,
            producers: 1,
            consumers: 1,
            queue: "perf-test".into(),
            queues: 1,
            exchange_type: None,
            exchange: None,
            topic_bindings: 1,
            routing_key: None,
            size: 16,
            persistent: false,
            durable: false,
            keep: false,
            confirm: None,
            qos: 0,
            autoack: false,
            multi_ack_every: None,
            rate: 0,
            producer_messages: 0,
            time: 0.0,
            latency: false,
            batch: 500,
            queue_args: Vec::new(),
            priorities: 0,
            expirations: Vec::new(),
            mode: Mode::Throughput,
            broker_pid: None,
            threads: None,
            handshake_batch: 100,
            source_addrs: 1,
            amqp10_address_v1: false,
            amqp10_settled: false,
            amqp10_fe2o3: false,
            nodelay: true,
            mqtt5: false,
            websocket: None,
        }
    }
}

pub const DEFAULT_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Why the command line was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    Help,
    Invalid(String),
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Help => f.write_str(USAGE),
            ArgError::Invalid(message) => f.write_str(message),
        }
    }
}

fn invalid(message: impl Into<String>) -> ArgError {
    ArgError::Invalid(message.into())
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, ArgError> {
    value
        .trim()
        .parse()
        .map_err(|_| invalid(format!("{flag}: '{value}' is not a valid number")))
}

/// Parses the arguments (without the program name).
pub fn parse_args<I, S>(args: I) -> Result<Config, ArgError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut config = Config::default();
    let mut rpc = false;
    let mut churn = false;
    let mut idle: Option<usize> = None;
    let mut mqtt: Vec<Mode> = Vec::new();
    let mut stomp = false;
    let mut amqp10 = false;
    let mut stream = false;
    let mut args = args.into_iter().map(Into::into);
    while let Some(arg) = args.next() {
        // --flag=value is accepted for long flags.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value)),
            _ => (arg.clone(), None),
        };
        let inline = inline.map(str::to_string);
        let mut value = |name: &str| -> Result<String, ArgError> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => args
                    .next()
                    .ok_or_else(|| invalid(format!("{name} needs a value"))),
            }
        };
        match flag.as_str() {
            "-h" | "--help" => return Err(ArgError::Help),
            "--uri" => config.uri = parse_uri(&value(&flag)?)?,
            "--consumer-uri" => config.consumer_uri = Some(parse_uri(&value(&flag)?)?),
            "-x" | "--producers" => config.producers = number(&flag, &value(&flag)?)?,
            "-y" | "--consumers" => config.consumers = number(&flag, &value(&flag)?)?,
            "-u" | "--queue" => config.queue = value(&flag)?,
            "--queues" => config.queues = number(&flag, &value(&flag)?)?,
            "-t" | "--type" => {
                config.exchange_type = Some(match value(&flag)?.as_str() {
                    "direct" => ExchangeType::Direct,
                    "fanout" => ExchangeType::Fanout,
                    "topic" => ExchangeType::Topic,
                    "headers" => ExchangeType::Headers,
                    other => {
                        return Err(invalid(format!(
                            "{flag}: unknown exchange type '{other}' \
                             (direct, fanout, topic or headers)"
                        )))
                    }
                })
            }
            "-e" | "--exchange" => config.exchange = Some(value(&flag)?),
            "--topic-bindings" => config.topic_bindings = number(&flag, &value(&flag)?)?,
            "-k" | "--routing-key" => config.routing_key = Some(value(&flag)?),
            "--queue-arg" => {
                let text = value(&flag)?;
                let Some((key, arg)) = text.split_once('=') else {
                    return Err(ArgError::Invalid(format!(
                        "--queue-arg expects KEY=VALUE, got '{text}'"
                    )));
                };
                config.queue_args.push((key.to_string(), arg.to_string()));
            }
            "--priorities" => config.priorities = number(&flag, &value(&flag)?)?,
            "--expirations" => {
                let text = value(&flag)?;
                config.expirations = text
                    .split(',')
                    .map(|ms| number(&flag, ms.trim()))
                    .collect::<Result<_, _>>()?;
            }
            "--durable" => config.durable = true,
            "--keep" => config.keep = true,
            "-s" | "--size" => config.size = number(&flag, &value(&flag)?)?,
            "-f" | "--flag" => match value(&flag)?.as_str() {
                "persistent" => config.persistent = true,
                "transient" => config.persistent = false,
                other => {
                    return Err(invalid(format!(
                        "{flag}: unknown flag '{other}' (persistent or transient)"
                    )))
                }
            },
            "-c" | "--confirm" => {
                let window: usize = number(&flag, &value(&flag)?)?;
                config.confirm = (window > 0).then_some(window);
            }
            "-q" | "--qos" => config.qos = number(&flag, &value(&flag)?)?,
            "-a" | "--autoack" => config.autoack = true,
            "--multi-ack-every" => {
                let n: usize = number(&flag, &value(&flag)?)?;
                config.multi_ack_every = Some(n.max(1));
            }
            "-r" | "--rate" => config.rate = number(&flag, &value(&flag)?)?,
            "-C" | "--pmessages" => config.producer_messages = number(&flag, &value(&flag)?)?,
            "-z" | "--time" => {
                let time: f64 = number(&flag, &value(&flag)?)?;
                if !(time >= 0.0 && time.is_finite()) {
                    return Err(invalid(format!("{flag}: must be a non-negative number")));
                }
                config.time = time;
            }
            "--latency" => config.latency = true,
            "--batch" => config.batch = number::<usize>(&flag, &value(&flag)?)?.max(1),
            "--rpc" => rpc = true,
            "--churn" => churn = true,
            "--idle-connections" => idle = Some(number(&flag, &value(&flag)?)?),
            "--handshake-batch" => {
                config.handshake_batch = number::<usize>(&flag, &value(&flag)?)?.max(1)
            }
            "--mqtt-idle" => mqtt.push(Mode::MqttIdle(number(&flag, &value(&flag)?)?)),
            "--mqtt-fan-in" => mqtt.push(Mode::MqttFanIn),
            "--mqtt-qos1" => mqtt.push(Mode::MqttQos1),
            "--stomp-queue" => stomp = true,
            "--amqp10-queue" => amqp10 = true,
            "--stream-queue" => stream = true,
            "--amqp10-address-v1" => config.amqp10_address_v1 = true,
            "--amqp10-settled" => config.amqp10_settled = true,
            "--amqp10-fe2o3" => config.amqp10_fe2o3 = true,
            "--no-nodelay" => config.nodelay = false,
            "--mqtt5" => config.mqtt5 = true,
            "--websocket" => config.websocket = Some(value(&flag)?),
            "--source-addrs" => {
                config.source_addrs = number::<u8>(&flag, &value(&flag)?)?.max(1);
            }
            "--broker-pid" => config.broker_pid = Some(number(&flag, &value(&flag)?)?),
            "--threads" => {
                let n: usize = number(&flag, &value(&flag)?)?;
                config.threads = Some(n.max(1));
            }
            other => return Err(invalid(format!("unknown argument '{other}' (see --help)"))),
        }
    }
    let scheme_mqtt = config.uri.scheme == Scheme::Mqtt;
    if stomp != (config.uri.scheme == Scheme::Stomp) {
        return Err(invalid(
            "--stomp-queue goes with a stomp:// --uri, and only with it",
        ));
    }
    if stomp && (rpc || churn || idle.is_some() || !mqtt.is_empty()) {
        return Err(invalid("--stomp-queue excludes the other modes"));
    }
    if amqp10 != (config.uri.scheme == Scheme::Amqp10) {
        return Err(invalid(
            "--amqp10-queue goes with an amqp10:// --uri, and only with it",
        ));
    }
    if amqp10 && (stomp || rpc || churn || idle.is_some() || !mqtt.is_empty()) {
        return Err(invalid("--amqp10-queue excludes the other modes"));
    }
    if stream != (config.uri.scheme == Scheme::Stream) {
        return Err(invalid(
            "--stream-queue goes with a stream:// --uri, and only with it",
        ));
    }
    if stream && (stomp || amqp10 || rpc || churn || idle.is_some() || !mqtt.is_empty()) {
        return Err(invalid("--stream-queue excludes the other modes"));
    }
    if config.websocket.is_some() && !matches!(mqtt.first(), Some(Mode::MqttIdle(_))) {
        return Err(invalid("--websocket goes with --mqtt-idle"));
    }
    if config.mqtt5 && mqtt.is_empty() {
        return Err(invalid("--mqtt5 goes with one of the --mqtt-* modes"));
    }
    if config.amqp10_address_v1 && !amqp10 {
        return Err(invalid("--amqp10-address-v1 goes with --amqp10-queue"));
    }
    if (config.amqp10_settled || !config.nodelay || config.amqp10_fe2o3) && !amqp10 {
        return Err(invalid(
            "--amqp10-settled, --no-nodelay and --amqp10-fe2o3 go with --amqp10-queue",
        ));
    }
    config.mode = match (rpc, churn, idle) {
        _ if stomp => Mode::StompQueue,
        _ if amqp10 => Mode::Amqp10Queue,
        _ if stream => Mode::StreamQueue,
        (false, false, None) if !mqtt.is_empty() => {
            if mqtt.len() > 1 {
                return Err(invalid("choose one of the --mqtt-* modes"));
            }
            if !scheme_mqtt {
                return Err(invalid("the --mqtt-* modes need an mqtt:// --uri"));
            }
            mqtt[0]
        }
        _ if !mqtt.is_empty() => {
            return Err(invalid(
                "the --mqtt-* modes exclude --rpc, --churn and --idle-connections",
            ))
        }
        _ if scheme_mqtt => {
            return Err(invalid("an mqtt:// --uri needs one of the --mqtt-* modes"))
        }
        (false, false, None) => Mode::Throughput,
        (true, false, None) => Mode::Rpc,
        (false, true, None) => Mode::Churn,
        (false, false, Some(n)) => Mode::Idle(n),
        _ => {
            return Err(invalid(
                "--rpc, --churn and --idle-connections exclude each other",
            ))
        }
    };
    if config.queues == 0 {
        return Err(invalid("--queues must be at least 1"));
    }
    if config.topic_bindings == 0 {
        return Err(invalid("--topic-bindings must be at least 1"));
    }
    if config.exchange.as_deref() == Some("") && config.exchange_type.is_some() {
        return Err(invalid(
            "--type needs a named exchange (the default exchange is direct)",
        ));
    }
    Ok(config)
}

/// Decodes %XX escapes.
fn percent_decode(text: &str) -> Result<String, ArgError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| invalid(format!("bad percent escape in URI: '{text}'")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| invalid(format!("URI part is not UTF-8: '{text}'")))
}

/// Parses `amqp://user:pass@host:port/vhost`. Missing parts take the defaults guest, guest,
/// 127.0.0.1 (localhost), 5672 and `/`; the vhost is percent-decoded (`%2f` is `/`), and an
/// empty vhost path also means `/`.
pub fn parse_uri(uri: &str) -> Result<Uri, ArgError> {
    let (scheme, rest) = if let Some(rest) = uri.strip_prefix("amqp://") {
        (Scheme::Amqp, rest)
    } else if let Some(rest) = uri.strip_prefix("mqtt://") {
        (Scheme::Mqtt, rest)
    } else if let Some(rest) = uri.strip_prefix("stomp://") {
        (Scheme::Stomp, rest)
    } else if let Some(rest) = uri.strip_prefix("amqp10://") {
        (Scheme::Amqp10, rest)
    } else if let Some(rest) = uri.strip_prefix("stream://") {
        (Scheme::Stream, rest)
    } else {
        return Err(invalid(format!(
            "URI must start with amqp://, amqp10://, mqtt://, stomp:// or stream:// (got '{uri}')"
        )));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        Some(info) => match info.split_once(':') {
            Some((u, p)) => (percent_decode(u)?, percent_decode(p)?),
            None => (percent_decode(info)?, String::new()),
        },
        None => ("guest".to_string(), "guest".to_string()),
    };
    let (host, port) = if let Some(bracketed) = hostport.strip_prefix('[') {
        let end = bracketed
            .find(']')
            .ok_or_else(|| invalid(format!("unclosed '[' in URI '{uri}'")))?;
        let host = &bracketed[..end];
        let port = match bracketed[end + 1..].strip_prefix(':') {
            Some(p) => Some(p),
            None if bracketed[end + 1..].is_empty() => None,
            None => return Err(invalid(format!("bad host in URI '{uri}'"))),
        };
        (host.to_string(), port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| invalid(format!("bad port '{p}' in URI '{uri}'")))?,
        None => match scheme {
            Scheme::Amqp | Scheme::Amqp10 => 5672,
            Scheme::Mqtt => 1883,
            Scheme::Stomp => 61613,
            Scheme::Stream => 5552,
        },
    };
    let host = if host.is_empty() {
        "127.0.0.1".to_string()
    } else {
        host
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    let vhost = if path.is_empty() {
        "/".to_string()
    } else {
        percent_decode(path)?
    };
    Ok(Uri {
        scheme,
        host,
        port,
        user,
        password,
        vhost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, ArgError> {
        parse_args(args.iter().copied())
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.uri.host, "127.0.0.1");
        assert_eq!(c.uri.port, 5672);
        assert_eq!(c.uri.vhost, "/");
        assert_eq!(
            (c.uri.user.as_str(), c.uri.password.as_str()),
            ("guest", "guest")
        );
        assert_eq!((c.producers, c.consumers, c.size), (1, 1, 16));
        assert_eq!(c.queue, "perf-test");
        assert_eq!(c.mode, Mode::Throughput);
    }

    #[test]
    fn short_and_long_flags() {
        let c = parse(&[
            "-x",
            "2",
            "--consumers",
            "3",
            "-u",
            "q",
            "--queues=4",
            "-t",
            "topic",
            "-e",
            "ex",
            "--topic-bindings",
            "1000",
            "-k",
            "rk",
            "-s",
            "100",
            "-f",
            "persistent",
            "-c",
            "50",
            "-q",
            "10",
            "-a",
            "-r",
            "1000",
            "-C",
            "5000",
            "-z",
            "2.5",
            "--latency",
            "--broker-pid",
            "42",
        ])
        .unwrap();
        assert_eq!((c.producers, c.consumers), (2, 3));
        assert_eq!((c.queue.as_str(), c.queues), ("q", 4));
        assert_eq!(c.exchange_type, Some(ExchangeType::Topic));
        assert_eq!(c.exchange.as_deref(), Some("ex"));
        assert_eq!(c.topic_bindings, 1000);
        assert_eq!(c.routing_key.as_deref(), Some("rk"));
        assert_eq!(c.size, 100);
        assert!(c.persistent && c.autoack && c.latency);
        assert_eq!(c.confirm, Some(50));
        assert_eq!(c.qos, 10);
        assert_eq!(c.rate, 1000);
        assert_eq!(c.producer_messages, 5000);
        assert_eq!(c.time, 2.5);
        assert_eq!(c.broker_pid, Some(42));
    }

    #[test]
    fn modes() {
        assert_eq!(parse(&["--rpc"]).unwrap().mode, Mode::Rpc);
        assert_eq!(parse(&["--churn"]).unwrap().mode, Mode::Churn);
        assert_eq!(
            parse(&["--idle-connections", "2000"]).unwrap().mode,
            Mode::Idle(2000)
        );
        assert!(matches!(
            parse(&["--rpc", "--churn"]),
            Err(ArgError::Invalid(_))
        ));
    }

    #[test]
    fn errors() {
        assert_eq!(parse(&["--help"]), Err(ArgError::Help));
        assert_eq!(parse(&["-h"]), Err(ArgError::Help));
        assert!(matches!(parse(&["-x"]), Err(ArgError::Invalid(m)) if m.contains("needs a value")));
        assert!(
            matches!(parse(&["-x", "many"]), Err(ArgError::Invalid(m)) if m.contains("not a valid number"))
        );
        assert!(
            matches!(parse(&["--bogus"]), Err(ArgError::Invalid(m)) if m.contains("unknown argument"))
        );
        assert!(matches!(parse(&["-t", "weird"]), Err(ArgError::Invalid(_))));
        assert!(matches!(parse(&["-z", "-1"]), Err(ArgError::Invalid(_))));
        assert!(matches!(
            parse(&["--queues", "0"]),
            Err(ArgError::Invalid(_))
        ));
        assert!(matches!(parse(&["-f", "fast"]), Err(ArgError::Invalid(_))));
    }

    #[test]
    fn confirm_zero_means_off() {
        assert_eq!(parse(&["-c", "0"]).unwrap().confirm, None);
    }

    #[test]
    fn uris() {
        let u = parse_uri("amqp://user:p%40ss@broker.example:5673/my%2fvhost").unwrap();
        assert_eq!(
            u,
            Uri {
                scheme: Scheme::Amqp,
                host: "broker.example".into(),
                port: 5673,
                user: "user".into(),
                password: "p@ss".into(),
                vhost: "my/vhost".into(),
            }
        );
        let u = parse_uri("amqp://localhost").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.vhost.as_str()),
            ("localhost", 5672, "/")
        );
        assert_eq!(u.user, "guest");
        let u = parse_uri("amqp://a:b@[::1]:5999/%2F").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.vhost.as_str()),
            ("::1", 5999, "/")
        );
        let u = parse_uri("amqp://a:b@h/").unwrap();
        assert_eq!(u.vhost, "/");
        assert!(parse_uri("http://x").is_err());
        assert!(parse_uri("amqp://h:notaport/").is_err());
        assert!(parse_uri("amqp://h/%zz").is_err());
        let u = parse_uri("mqtt://dev:pw@127.0.0.1").unwrap();
        assert_eq!(
            (u.scheme, u.port, u.user.as_str()),
            (Scheme::Mqtt, 1883, "dev")
        );
    }

    #[test]
    fn mqtt_modes_need_an_mqtt_uri_and_exclude_each_other() {
        let c = parse(&[
            "--uri",
            "mqtt://127.0.0.1",
            "--mqtt-idle",
            "500",
            "--source-addrs",
            "4",
        ])
        .unwrap();
        assert_eq!((c.mode, c.source_addrs), (Mode::MqttIdle(500), 4));
        assert_eq!(
            parse(&["--uri", "mqtt://h", "--mqtt-qos1"]).unwrap().mode,
            Mode::MqttQos1
        );
        assert!(parse(&["--mqtt-fan-in"]).is_err(), "amqp:// URI");
        assert!(parse(&["--uri", "mqtt://h"]).is_err(), "no MQTT mode");
        assert!(parse(&["--uri", "mqtt://h", "--mqtt-qos1", "--mqtt-fan-in"]).is_err());
        assert!(parse(&["--uri", "mqtt://h", "--mqtt-qos1", "--rpc"]).is_err());
        assert!(
            parse(&["--uri", "mqtt://h", "--mqtt-qos1", "--mqtt5"])
                .unwrap()
                .mqtt5
        );
        assert!(parse(&["--uri", "mqtt://h", "--mqtt5"]).is_err());
        let web = parse(&[
            "--uri",
            "mqtt://h",
            "--mqtt-idle",
            "5",
            "--websocket",
            "/ws",
        ])
        .unwrap();
        assert_eq!(web.websocket.as_deref(), Some("/ws"));
        assert!(parse(&["--uri", "mqtt://h", "--mqtt-qos1", "--websocket", "/ws"]).is_err());
    }

    #[test]
    fn stream_mode_goes_with_a_stream_uri() {
        let c = parse(&["--uri", "stream://u:p@h/%2f", "--stream-queue", "-s", "12"]).unwrap();
        assert_eq!((c.mode, c.uri.port, c.size), (Mode::StreamQueue, 5552, 12));
        assert!(parse(&["--stream-queue"]).is_err());
        assert!(parse(&["--uri", "stream://h"]).is_err());
        assert!(parse(&["--uri", "stream://h", "--stream-queue", "--rpc"]).is_err());
    }

    #[test]
    fn stomp_mode_goes_with_a_stomp_uri() {
        let c = parse(&["--uri", "stomp://u:p@h/%2f", "--stomp-queue", "-q", "200"]).unwrap();
        assert_eq!(
            (c.mode, c.uri.port, c.uri.vhost.as_str()),
            (Mode::StompQueue, 61613, "/")
        );
        assert!(parse(&["--stomp-queue"]).is_err());
        assert!(parse(&["--uri", "stomp://h"]).is_err());
        assert!(parse(&["--uri", "stomp://h", "--stomp-queue", "--rpc"]).is_err());
    }

    #[test]
    fn amqp10_mode_goes_with_an_amqp10_uri() {
        let c = parse(&[
            "--uri",
            "amqp10://u:p@h/%2f",
            "--amqp10-queue",
            "-q",
            "200",
            "-c",
            "1000",
        ])
        .unwrap();
        assert_eq!(
            (c.mode, c.uri.scheme, c.uri.port, c.uri.vhost.as_str()),
            (Mode::Amqp10Queue, Scheme::Amqp10, 5672, "/")
        );
        assert_eq!(
            (c.qos, c.confirm, c.amqp10_address_v1),
            (200, Some(1000), false)
        );
        let v1 = parse(&[
            "--uri",
            "amqp10://h:5673",
            "--amqp10-queue",
            "--amqp10-address-v1",
        ])
        .unwrap();
        assert!(v1.amqp10_address_v1);
        let settled = parse(&[
            "--uri",
            "amqp10://h",
            "--amqp10-queue",
            "--amqp10-settled",
            "--no-nodelay",
        ])
        .unwrap();
        assert!(settled.amqp10_settled && !settled.nodelay);
        assert!(Config::default().nodelay);
        assert!(parse(&["--amqp10-settled"]).is_err());
        assert!(parse(&["--amqp10-fe2o3"]).is_err());
        let fe2o3 = parse(&["--uri", "amqp10://h", "--amqp10-queue", "--amqp10-fe2o3"]).unwrap();
        assert!(fe2o3.amqp10_fe2o3);
        assert_eq!(v1.uri.port, 5673);
        assert!(parse(&["--amqp10-queue"]).is_err(), "amqp:// URI");
        assert!(parse(&["--uri", "amqp10://h"]).is_err(), "no mode");
        assert!(parse(&["--amqp10-address-v1"]).is_err());
        assert!(parse(&["--uri", "amqp10://h", "--amqp10-queue", "--rpc"]).is_err());
        assert!(parse(&["--uri", "amqp10://h", "--amqp10-queue", "--stomp-queue"]).is_err());
    }
}
