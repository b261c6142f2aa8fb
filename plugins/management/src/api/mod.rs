//! The RabbitMQ-compatible management HTTP API: authentication by HTTP basic auth against the
//! core's users, access by user tags as RabbitMQ grants it, and routing of `/api/...` paths to
//! the handlers in the sibling modules. Every handler reads or changes the core directly;
//! JSON field names are RabbitMQ's so existing tools parse them.

mod browse;
mod columns;
mod join;
mod json;
mod limits;
mod paging;
mod parameters;
mod quorum;
mod requests;
mod resources;
mod runtime;
mod stream_protocol;
mod streams;
mod topology;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use serde_json::{json, Value as Json};
use warren_core::access::User;
use warren_core::vhost::VHost;
use warren_core::{Broker, CoreError, ErrorKind};

use crate::http::{Request, Response};

pub use join::{JoinError, JoinOutcome};
pub use json::{table_to_json, value_to_json};
pub use limits::{import_user_limits, user_limits_of, USER_LIMITS_PARAMETER};
pub use quorum::{QuorumOpError, QuorumView, RaftFigures, RaftMember, ReplicaChange};

/// Imports a definitions document (the JSON body of `POST /api/definitions`): validates all
/// of it first, applies nothing on error, and returns the reason a user can act on.
pub type DefinitionsImporter = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// Memory and disk as the node sees them (`/api/nodes`, metrics).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeResources {
    /// Resident memory in bytes.
    pub memory_used: u64,
    /// The memory high watermark in bytes.
    pub memory_limit: u64,
    /// Free disk space on the data directory's file system, in bytes.
    pub disk_free: u64,
    /// The free-disk limit in bytes.
    pub disk_free_limit: u64,
}

/// Reads the node's resources (called per request; may raise or clear alarms as a check).
pub type ResourceReader = Arc<dyn Fn() -> NodeResources + Send + Sync>;

/// A listener the node serves, as `/api/overview` lists it.
#[derive(Debug, Clone)]
pub struct ListenerInfo {
    /// RabbitMQ's protocol name: `amqp`, `amqp/ssl`, `mqtt`, `mqtt/ssl`, `stomp`,
    /// `stomp/ssl`, `http`, `https`, `http/prometheus`, `https/prometheus`.
    pub protocol: String,
    /// The bound address.
    pub addr: SocketAddr,
}

/// Everything the API serves from.
pub struct Management {
    /// The broker model.
    pub broker: Arc<Broker>,
    /// The node name shown everywhere (`warren@HOST`).
    pub node_name: String,
    /// The cluster name.
    pub cluster_name: String,
    /// Bound listeners.
    pub listeners: Vec<ListenerInfo>,
    /// `POST /api/definitions`.
    pub import_definitions: DefinitionsImporter,
    /// Memory and disk readings.
    pub resources: ResourceReader,
    /// When the node started.
    pub started: Instant,
    /// Message rates, sampled every `statistics_interval` by [`crate::serve_rates`].
    pub rates: crate::rates::RateSampler,
    /// `collect_statistics_interval`.
    pub statistics_interval: std::time::Duration,
    /// The cluster this node belongs to, when it runs clustered.
    pub cluster: Option<Arc<dyn ClusterView>>,
    /// Quorum queues' Raft groups (status, membership, leadership, metrics).
    pub quorum: Option<Arc<dyn QuorumView>>,
    /// Connections' last socket byte counts, for `recv_oct_details` and `send_oct_details`.
    pub octets: crate::octets::OctetRates,
}

/// What the API shows of the cluster (implemented by the server on the cluster crate).
pub trait ClusterView: Send + Sync {
    /// The other members' `/api/nodes` entries (`running: false` for those not answering).
    fn peer_nodes(&self) -> Vec<Json>;
    /// `cluster_status`: this node, the cluster id, the leader, the members.
    fn status(&self) -> Json;
    /// `forget_cluster_node`: removes a member, through the leader.
    fn forget(&self, node: &str) -> Result<(), String>;
    /// `join_cluster`: this node leaves its own one-node cluster (or its blank state) for
    /// the cluster `node` (`warren@HOST` or `warren@HOST:PORT`) is a member of. On success
    /// the node restarts shortly after answering, wipes its data and joins.
    fn join(&self, _node: &str) -> Result<JoinOutcome, JoinError> {
        Err(JoinError::NotSupported)
    }
    /// `reset`: this node leaves its cluster (through the leader) and restarts shortly
    /// after answering; the next start empties its data and starts it blank.
    fn reset(&self) -> Result<(), JoinError> {
        Err(JoinError::NotSupported)
    }
    /// The home node of a replicated queue (the node it was declared on), shown as the
    /// queue's `node` in listings as RabbitMQ shows it; `None` for a queue the metadata log
    /// did not declare (node-local ones), which lives on this node.
    fn home_of(&self, _vhost: &str, _queue: &str) -> Option<String> {
        None
    }
    /// The cluster's permanent id (it does not change with `cluster_name`), for
    /// `rabbitmq_identity_info`'s `rabbitmq_cluster_permanent_id`.
    fn cluster_id(&self) -> Option<String> {
        None
    }
    /// Every running peer's own listing of `kind` (`connections`, `channels`), each object
    /// with its `node` (consumers: in `channel_details`); peers that do not answer within a
    /// second are left out.
    fn peer_listing(&self, _kind: ListingKind) -> Vec<Json> {
        Vec::new()
    }
    /// Closes connection `name` on whichever peer has it; false when none has.
    fn close_peer_connection(&self, _name: &str, _reason: &str) -> bool {
        false
    }
}

/// What [`ClusterView::peer_listing`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingKind {
    /// `/api/connections`.
    Connections,
    /// `/api/channels`.
    Channels,
    /// `/api/consumers`.
    Consumers,
}

impl ListingKind {
    /// The name it travels under.
    pub fn name(self) -> &'static str {
        match self {
            ListingKind::Connections => "connections",
            ListingKind::Channels => "channels",
            ListingKind::Consumers => "consumers",
        }
    }

    /// The kind called `name`.
    pub fn from_name(name: &str) -> Option<ListingKind> {
        match name {
            "connections" => Some(ListingKind::Connections),
            "channels" => Some(ListingKind::Channels),
            "consumers" => Some(ListingKind::Consumers),
            _ => None,
        }
    }
}

impl Management {
    /// This node's own listing of `kind`, unfiltered (a peer filters it for its caller):
    /// what [`ClusterView::peer_listing`] asks each node for.
    pub fn local_listing(&self, kind: ListingKind) -> Json {
        let connections = self.broker.connections().list();
        Json::Array(match kind {
            ListingKind::Connections => {
                let octets = self.connection_octets(&connections);
                connections
                    .iter()
                    .map(|c| self.connection_json(c, &octets))
                    .collect()
            }
            ListingKind::Channels => connections
                .iter()
                .flat_map(|c| self.channels_of(c))
                .collect(),
            ListingKind::Consumers => self
                .broker
                .vhost_names()
                .iter()
                .filter_map(|name| self.broker.vhost(name))
                .flat_map(|vhost| self.local_consumers_of(&vhost))
                .collect(),
        })
    }

    /// Closes connection `name` if this node has it (a peer's request).
    pub fn close_local_connection(&self, name: &str, reason: &str) -> bool {
        match self
            .broker
            .connections()
            .list()
            .into_iter()
            .find(|c| c.info.name() == name)
        {
            Some(found) => {
                self.broker.close_connection(found.info.id, reason);
                true
            }
            None => false,
        }
    }
}

/// The RabbitMQ version whose management API and metric names Warren follows; tools that
/// branch on `rabbitmq_version` take the 4.x paths.
pub const RABBITMQ_COMPATIBLE_VERSION: &str = "4.0.0";

/// What a user's tags allow, from least to most (RabbitMQ's management tags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    /// `management`: own vhosts' objects and own connections.
    Management,
    /// `policymaker`: management plus policies in their vhosts.
    Policymaker,
    /// `monitoring`: management plus every connection, channel, node and vhost (read).
    Monitoring,
    /// `administrator`: everything.
    Administrator,
}

/// The authenticated caller, and the page of a listing they asked for (`?page=`).
pub(crate) struct Caller {
    pub user: Arc<User>,
    tags: Vec<String>,
    /// Applied by [`Management::list_per_vhost`] to the listing before it is serialized;
    /// other listings are paged from their JSON after the handler.
    paging: Option<paging::PageQuery>,
}

impl Caller {
    fn has(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Whether the caller holds `role` (administrator implies every role; policymaker and
    /// monitoring imply management).
    pub fn is(&self, role: Role) -> bool {
        self.has("administrator")
            || match role {
                Role::Administrator => false,
                Role::Monitoring => self.has("monitoring"),
                Role::Policymaker => self.has("policymaker"),
                Role::Management => {
                    self.has("management") || self.has("monitoring") || self.has("policymaker")
                }
            }
    }

    /// Whether the caller sees objects of `vhost`: monitoring users see every vhost, others
    /// those they have permissions in.
    pub fn sees_vhost(&self, vhost: &VHost) -> bool {
        self.is(Role::Monitoring) || vhost.permissions(&self.user.name).is_some()
    }

    /// Whether the caller may act in `vhost` (has permissions there, as RabbitMQ requires
    /// even of administrators for objects inside a vhost).
    pub fn may_use_vhost(&self, vhost: &VHost) -> bool {
        vhost.permissions(&self.user.name).is_some()
    }
}

/// The error body RabbitMQ sends: `{"error": ..., "reason": ...}`.
pub(crate) fn error(status: u16, error: &str, reason: impl Into<String>) -> Response {
    Response::json(status, &json!({"error": error, "reason": reason.into()}))
}

pub(crate) fn not_found() -> Response {
    error(404, "Object Not Found", "Not Found")
}

pub(crate) fn bad_request(reason: impl Into<String>) -> Response {
    error(400, "bad_request", reason)
}

/// 401 with RabbitMQ's body; RabbitMQ answers a login failure and a missing tag or vhost
/// access alike with 401 `not_authorised`.
pub(crate) fn not_authorized(reason: &str) -> Response {
    let mut response = error(401, "not_authorised", reason);
    response.headers.push((
        "www-authenticate",
        "Basic realm=\"RabbitMQ Management\"".to_string(),
    ));
    response
}

/// A core error as an HTTP error.
pub(crate) fn core_error(error: CoreError) -> Response {
    match error.kind {
        ErrorKind::NotFound => self::error(404, "not_found", error.message),
        ErrorKind::AccessRefused | ErrorKind::NotAllowed => {
            self::error(401, "not_authorised", error.message)
        }
        ErrorKind::ResourceLocked => self::error(405, "resource_locked", error.message),
        ErrorKind::Unavailable => self::error(503, "unavailable", error.message),
        _ => bad_request(error.message),
    }
}

/// Whether answering `request` may take long: listings (`GET /api/KIND` and
/// `GET /api/KIND/VHOST`, the overview, which walk every queue), definitions export and
/// import, and browsing a queue (it reads paged-out bodies and stream chunks from disk).
/// Reading, declaring or deleting one object is cheap.
pub fn is_heavy(request: &Request) -> bool {
    let segments: Vec<&str> = request
        .path
        .split('/')
        .filter(|segment| !segment.is_empty())
        .collect();
    match segments.as_slice() {
        ["api", "definitions", ..] => true,
        ["api", "queues", _, _, "browse"] => true,
        ["api", ..] => request.method == "GET" && segments.len() <= 3,
        _ => false,
    }
}

/// 201 when the object was created, 204 when it replaced one (RabbitMQ's PUT answers).
pub(crate) fn created_or_updated(created: bool) -> Response {
    Response::empty(if created { 201 } else { 204 })
}

impl Management {
    /// Answers one request: authenticates it, then routes it (the server's layers do the two
    /// steps apart, see [`Management::authenticate_head`] and [`Management::handle_with`]).
    pub fn handle(&self, request: Request, peer: SocketAddr) -> Response {
        let Some(segments) = request.segments() else {
            return bad_request("path is not valid percent-encoded UTF-8");
        };
        if segments.first().map(String::as_str) != Some("api") {
            return self.handle_with(request, None);
        }
        match self.authenticate(request.header("authorization"), peer) {
            Ok(caller) => self.handle_with(request, Some(caller.user)),
            Err(response) => response,
        }
    }

    /// Checks a request's credentials from its head alone, before its body is read:
    /// `Ok(None)` for paths that need no login (the web UI's files), the user for an
    /// `/api/...` request whose basic auth names a user with a management tag, and the 401
    /// to answer at once otherwise.
    pub fn authenticate_head(
        &self,
        head: &hyper::http::request::Parts,
        peer: SocketAddr,
    ) -> Result<Option<Arc<User>>, Response> {
        let first = head
            .uri
            .path()
            .split('/')
            .find(|segment| !segment.is_empty());
        if first.and_then(crate::http::percent_decode).as_deref() != Some("api") {
            return Ok(None);
        }
        let authorization = head
            .headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok());
        let caller = self.authenticate(authorization, peer)?;
        if !caller.is(Role::Management) {
            return Err(not_authorized("Not management user"));
        }
        Ok(Some(caller.user))
    }

    /// Answers a request whose caller the server already authenticated (`user`), or, for
    /// `/api/...` without one, authenticates it from its headers first.
    pub fn handle_with(&self, request: Request, user: Option<Arc<User>>) -> Response {
        let Some(segments) = request.segments() else {
            return bad_request("path is not valid percent-encoded UTF-8");
        };
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let ["api", path @ ..] = segments.as_slice() else {
            return crate::ui::serve(&request).unwrap_or_else(not_found);
        };
        let Some(user) = user else {
            return not_authorized("Login failed");
        };
        let paging = if request.method == "GET" {
            match paging::PageQuery::from_request(&request) {
                Ok(paging) => paging,
                Err(refusal) => return refusal,
            }
        } else {
            None
        };
        let caller = Caller {
            tags: user.tags.clone(),
            user,
            paging,
        };
        if !caller.is(Role::Management) {
            return not_authorized("Not management user");
        }
        let response = self.route(&request, path, &caller);
        if request.method == "GET" {
            columns::select_columns(&request, paging::page_listing(&request, response))
        } else {
            response
        }
    }

    fn authenticate(
        &self,
        authorization: Option<&str>,
        peer: SocketAddr,
    ) -> Result<Caller, Response> {
        let credentials = authorization
            .and_then(|value| value.strip_prefix("Basic "))
            .and_then(|token| {
                base64::engine::general_purpose::STANDARD
                    .decode(token.trim())
                    .ok()
            })
            .and_then(|bytes| String::from_utf8(bytes).ok());
        let Some(credentials) = credentials else {
            return Err(not_authorized("Login failed"));
        };
        let (name, password) = credentials.split_once(':').unwrap_or((&credentials, ""));
        match self
            .broker
            .authenticate(name, password, peer.ip().is_loopback())
        {
            Ok(user) => Ok(Caller {
                tags: user.tags.clone(),
                user,
                paging: None,
            }),
            Err(failure) => {
                tracing::warn!(user = %name, reason = %failure, "HTTP API login refused");
                Err(not_authorized("Login failed"))
            }
        }
    }

    fn route(&self, request: &Request, path: &[&str], caller: &Caller) -> Response {
        let method = request.method.as_str();
        let need = |role: Role| -> Option<Response> {
            (!caller.is(role)).then(|| {
                not_authorized(match role {
                    Role::Administrator => "Not administrator user",
                    Role::Monitoring => "Not monitor user",
                    Role::Policymaker => "Not policymaker user",
                    Role::Management => "Not management user",
                })
            })
        };
        // History windows (`msg_rates_age`, `lengths_age`, ...) for the objects that have
        // rates; a bad window is a 400 there, as in RabbitMQ.
        let ranges = || {
            crate::rates::Ranges::from_query(|name| request.query_param(name)).map_err(bad_request)
        };
        if let Some(response) = self.quorum_api(request, path, caller) {
            return response;
        }
        if let Some(response) = self.stream_protocol_api(request, path, caller) {
            return response;
        }
        match (method, path) {
            ("GET", ["overview"] | ["vhosts", ..] | ["exchanges", ..] | ["queues", ..]) => {
                match ranges() {
                    Ok(ranges) => self.route_with_ranges(request, path, caller, &ranges),
                    Err(response) => response,
                }
            }
            ("GET", ["whoami"]) => Response::json(
                200,
                &json!({"name": caller.user.name, "tags": caller.user.tags}),
            ),
            ("GET", ["nodes"]) => need(Role::Monitoring)
                .unwrap_or_else(|| Response::json(200, &Json::Array(self.nodes_json()))),
            ("GET", ["nodes", name]) => need(Role::Monitoring).unwrap_or_else(|| {
                match self
                    .nodes_json()
                    .into_iter()
                    .find(|node| node.get("name").and_then(Json::as_str) == Some(*name))
                {
                    Some(node) => Response::json(200, &node),
                    None => not_found(),
                }
            }),
            ("GET", ["cluster-status"]) => need(Role::Monitoring)
                .unwrap_or_else(|| Response::json(200, &self.cluster_status())),
            ("DELETE", ["cluster-nodes", name]) => {
                need(Role::Administrator).unwrap_or_else(|| match &self.cluster {
                    None => bad_request("this node does not run clustered"),
                    Some(cluster) => match cluster.forget(name) {
                        Ok(()) => Response::empty(204),
                        Err(error) => self::error(503, "unavailable", error),
                    },
                })
            }
            ("POST", ["join-cluster"]) => {
                need(Role::Administrator).unwrap_or_else(|| self.join_cluster(request))
            }
            ("POST", ["reset"]) => need(Role::Administrator).unwrap_or_else(|| self.reset_node()),
            ("GET", ["health", "checks", "alarms"])
            | ("GET", ["health", "checks", "local-alarms"]) => self.alarms_check(path[2]),
            ("GET", ["aliveness-test", vhost]) => self.aliveness_test(caller, vhost),
            (_, ["vhosts", ..]) => self.vhosts(request, &path[1..], caller, &Default::default()),
            (_, ["users", ..]) => {
                need(Role::Administrator).unwrap_or_else(|| self.users(request, &path[1..]))
            }
            (_, ["permissions", ..]) => {
                need(Role::Administrator).unwrap_or_else(|| self.permissions(request, &path[1..]))
            }
            (_, ["topic-permissions", ..]) => need(Role::Administrator)
                .unwrap_or_else(|| self.topic_permissions(request, &path[1..])),
            (_, ["parameters", ..]) => self.runtime_parameters(request, &path[1..], caller),
            (_, ["vhost-limits", ..]) => self.vhost_limits_api(request, &path[1..], caller),
            (_, ["user-limits", ..]) => need(Role::Administrator)
                .unwrap_or_else(|| self.user_limits_api(request, &path[1..])),
            (_, ["global-parameters", ..]) => need(Role::Administrator)
                .unwrap_or_else(|| self.global_parameters(request, &path[1..])),
            (_, ["policies", ..]) => self.policies(request, &path[1..], caller, false),
            (_, ["operator-policies", ..]) => need(Role::Administrator)
                .unwrap_or_else(|| self.policies(request, &path[1..], caller, true)),
            (_, ["definitions", ..]) => {
                need(Role::Administrator).unwrap_or_else(|| self.definitions(request, &path[1..]))
            }
            (_, ["exchanges", ..]) => {
                self.exchanges(request, &path[1..], caller, &Default::default())
            }
            (_, ["queues", ..]) => self.queues(request, &path[1..], caller, &Default::default()),
            ("GET", ["bindings", ..]) => self.bindings(&path[1..], caller),
            ("POST", ["bindings", ..]) | ("DELETE", ["bindings", ..]) => {
                self.change_binding(request, &path[1..], caller)
            }
            (_, ["connections", ..]) => self.connections(request, &path[1..], caller),
            ("GET", ["channels"]) => self.channels(caller, None),
            ("GET", ["vhosts-channels", vhost]) => self.channels(caller, Some(vhost)),
            ("GET", ["consumers"]) => self.consumers(caller, None),
            ("GET", ["consumers", vhost]) => self.consumers(caller, Some(vhost)),
            _ => not_found(),
        }
    }

    /// GET on the objects that carry rates, with the request's history windows.
    fn route_with_ranges(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
        ranges: &crate::rates::Ranges,
    ) -> Response {
        match path {
            ["overview"] => self.overview(caller, ranges),
            ["vhosts", ..] => self.vhosts(request, &path[1..], caller, ranges),
            ["exchanges", ..] => self.exchanges(request, &path[1..], caller, ranges),
            _ => self.queues(request, &path[1..], caller, ranges),
        }
    }

    /// The vhosts the caller sees, filtered by an optional vhost path segment. `Err` is the
    /// response for a vhost that does not exist or is not the caller's.
    pub(crate) fn visible_vhosts(
        &self,
        caller: &Caller,
        only: Option<&str>,
    ) -> Result<Vec<Arc<VHost>>, Response> {
        match only {
            Some(name) => {
                let vhost = self.broker.vhost(name).ok_or_else(not_found)?;
                if !caller.sees_vhost(&vhost) {
                    return Err(not_authorized("User not authorised to access virtual host"));
                }
                Ok(vec![vhost])
            }
            None => Ok(self
                .broker
                .vhost_names()
                .iter()
                .filter_map(|name| self.broker.vhost(name))
                .filter(|vhost| caller.sees_vhost(vhost))
                .collect()),
        }
    }

    /// `GET /api/KIND[/VHOST]`: the objects `list` gives for each vhost the caller sees (all,
    /// or the one named), as one JSON array, or the page of it the caller asked for.
    pub(crate) fn list_per_vhost(
        &self,
        caller: &Caller,
        only: Option<&str>,
        list: impl Fn(&Arc<VHost>) -> Vec<Json>,
    ) -> Response {
        let items: Vec<Json> = match self.visible_vhosts(caller, only) {
            Ok(vhosts) => vhosts.iter().flat_map(list).collect(),
            Err(response) => return response,
        };
        match &caller.paging {
            None => Response::json(200, &Json::Array(items)),
            Some(paging) => match paging.apply(items) {
                Ok(page) => Response::json(200, &page),
                Err(refusal) => refusal,
            },
        }
    }

    /// [`Management::list_per_vhost`] for a listing that can be paged by name before its JSON
    /// is built: `list` gives each vhost's items as `(name, build)`, in listing order, and
    /// only the items on the requested page are built. Without a page, or for a page sorted
    /// by another field, every item is built as before.
    pub(crate) fn list_per_vhost_by_name<'a>(
        &self,
        caller: &Caller,
        only: Option<&str>,
        list: impl Fn(&Arc<VHost>) -> Vec<(String, Box<dyn FnOnce() -> Json + 'a>)>,
    ) -> Response {
        let vhosts = match self.visible_vhosts(caller, only) {
            Ok(vhosts) => vhosts,
            Err(response) => return response,
        };
        let items: Vec<(String, Box<dyn FnOnce() -> Json + 'a>)> =
            vhosts.iter().flat_map(list).collect();
        match &caller.paging {
            Some(paging) if paging.needs_names_only() => {
                match paging.apply_named(items, |build| build()) {
                    Ok(page) => Response::json(200, &page),
                    Err(refusal) => refusal,
                }
            }
            paging => {
                let items: Vec<Json> = items.into_iter().map(|(_, build)| build()).collect();
                match paging {
                    None => Response::json(200, &Json::Array(items)),
                    Some(paging) => match paging.apply(items) {
                        Ok(page) => Response::json(200, &page),
                        Err(refusal) => refusal,
                    },
                }
            }
        }
    }

    /// `GET /api/KIND/VHOST/NAME[/...]`: what `find` answers in a vhost the caller sees; 404
    /// when it finds nothing.
    pub(crate) fn show_in_vhost(
        &self,
        caller: &Caller,
        vhost: &str,
        find: impl FnOnce(&Arc<VHost>) -> Option<Json>,
    ) -> Response {
        match self.visible_vhosts(caller, Some(vhost)) {
            Ok(vhosts) => match find(&vhosts[0]) {
                Some(json) => Response::json(200, &json),
                None => not_found(),
            },
            Err(response) => response,
        }
    }

    /// PUT, DELETE and POST on an object: runs `act` in the vhost the caller acts in (see
    /// [`Management::usable_vhost`]), answering its refusal otherwise.
    pub(crate) fn act_in_vhost(
        &self,
        caller: &Caller,
        vhost: &str,
        act: impl FnOnce(Arc<VHost>) -> Response,
    ) -> Response {
        match self.usable_vhost(caller, vhost) {
            Ok(target) => act(target),
            Err(response) => response,
        }
    }

    /// The vhost a caller acts in (PUT, DELETE, publish, get): it must exist and the caller
    /// must have permissions there.
    pub(crate) fn usable_vhost(&self, caller: &Caller, name: &str) -> Result<Arc<VHost>, Response> {
        let vhost = self.broker.vhost(name).ok_or_else(not_found)?;
        if !caller.may_use_vhost(&vhost) {
            return Err(not_authorized("User not authorised to access virtual host"));
        }
        Ok(vhost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Request {
        Request {
            method: "GET".into(),
            path: path.into(),
            query: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn listings_definitions_and_browsing_run_off_the_protocol_workers() {
        assert!(is_heavy(&get("/api/queues")));
        assert!(is_heavy(&get("/api/definitions")));
        assert!(is_heavy(&get("/api/queues/%2F/q/browse")));
        assert!(!is_heavy(&get("/api/queues/%2F/q")));
        assert!(!is_heavy(&get("/api/queues/%2F/q/bindings")));
    }
}
