//! warrenctl's quorum queue verbs, as rabbitmq-queues and rabbitmq-diagnostics have them:
//! `quorum_status [VHOST] QUEUE`, `add_member [VHOST] QUEUE NODE`,
//! `delete_member [VHOST] QUEUE NODE`, `grow NODE all|even [--vhost-pattern P]
//! [--queue-pattern P]`, `shrink NODE [--errors-only]`,
//! `transfer_leadership [VHOST] QUEUE NODE`, `rebalance [quorum|all]` and
//! `check_if_node_is_quorum_critical`. Without VHOST the queue is in `-p`'s vhost.

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Value as Json};

use super::{cell, Ctl, CtlError};
use crate::http::percent_encode;

/// A verb's outcome (`None`: not one of this module's verbs), boxed.
type VerbFuture<'a> = Pin<Box<dyn Future<Output = Option<Result<String, CtlError>>> + Send + 'a>>;

/// The verbs of this module.
const VERBS: [&str; 8] = [
    "quorum_status",
    "add_member",
    "delete_member",
    "grow",
    "shrink",
    "transfer_leadership",
    "rebalance",
    "check_if_node_is_quorum_critical",
];

/// `quorum_status`'s columns, RabbitMQ's keys.
const STATUS_COLUMNS: [&str; 10] = [
    "Node Name",
    "Raft State",
    "Membership",
    "Last Log Index",
    "Last Written",
    "Last Applied",
    "Commit Index",
    "Snapshot Index",
    "Term",
    "Machine Version",
];

/// rabbitmq-diagnostics' exit code for a failed health check.
const CHECK_FAILED: i32 = 69;

impl Ctl {
    /// Runs `command` if it is one of this module's verbs; `None` otherwise (boxed, as
    /// `parameter_command` is).
    pub(super) fn quorum_command<'a>(
        &'a self,
        command: &'a str,
        args: &'a [String],
    ) -> VerbFuture<'a> {
        if !VERBS.contains(&command) {
            return Box::pin(std::future::ready(None));
        }
        Box::pin(async move { Some(self.quorum_verb(command, args).await) })
    }

    /// The vhost and queue of `[VHOST] QUEUE` followed by `rest` more arguments.
    fn queue_args(
        &self,
        command: &str,
        args: &[String],
        rest: usize,
        usage: &str,
    ) -> Result<(String, String), CtlError> {
        match args.len().checked_sub(rest) {
            Some(1) => Ok((self.options.vhost.clone(), args[0].clone())),
            Some(2) => Ok((args[0].clone(), args[1].clone())),
            _ => Err(CtlError::usage(format!(
                "{command}: usage: {command} {usage}"
            ))),
        }
    }

    fn queue_path(vhost: &str, queue: &str) -> String {
        format!(
            "/api/queues/quorum/{}/{}",
            percent_encode(vhost),
            percent_encode(queue)
        )
    }

    async fn quorum_verb(&self, command: &str, args: &[String]) -> Result<String, CtlError> {
        match command {
            "quorum_status" => {
                let (vhost, queue) = self.queue_args(command, args, 0, "[VHOST] QUEUE")?;
                let rows = self
                    .call(
                        "GET",
                        &format!("{}/status", Self::queue_path(&vhost, &queue)),
                        None,
                    )
                    .await?;
                if self.options.json {
                    return Ok(serde_json::to_string_pretty(&rows).unwrap_or_default() + "\n");
                }
                let mut out = self.banner(format!(
                    "Status of quorum queue {queue} in vhost {vhost} ..."
                ));
                out.push_str(&STATUS_COLUMNS.join("\t"));
                out.push('\n');
                for row in rows.as_array().into_iter().flatten() {
                    let cells: Vec<String> =
                        STATUS_COLUMNS.iter().map(|c| cell(&row[*c])).collect();
                    out.push_str(&cells.join("\t"));
                    out.push('\n');
                }
                Ok(out)
            }
            "add_member" | "delete_member" | "transfer_leadership" => {
                let (vhost, queue) = self.queue_args(command, args, 1, "[VHOST] QUEUE NODE")?;
                let node = args[args.len() - 1].clone();
                let base = Self::queue_path(&vhost, &queue);
                let body = json!({ "node": node });
                let (method, path, banner) = match command {
                    "add_member" => (
                        "POST",
                        format!("{base}/replicas/add"),
                        format!("Adding a replica for queue {queue} in vhost {vhost} on node {node}..."),
                    ),
                    "delete_member" => (
                        "DELETE",
                        format!("{base}/replicas/delete"),
                        format!("Removing a replica of queue {queue} in vhost {vhost} on node {node}..."),
                    ),
                    _ => (
                        "POST",
                        format!("{base}/leader"),
                        format!("Transferring leadership of queue {queue} in vhost {vhost} to node {node}..."),
                    ),
                };
                self.call(method, &path, Some(&body)).await?;
                Ok(self.banner(banner))
            }
            "grow" => {
                let (Some(node), Some(strategy)) = (args.first(), args.get(1)) else {
                    return Err(CtlError::usage(
                        "grow: usage: grow NODE all|even [--vhost-pattern P] [--queue-pattern P]",
                    ));
                };
                let body = json!({
                    "strategy": strategy,
                    "vhost_pattern": self.options.vhost_pattern.as_deref().unwrap_or(".*"),
                    "queue_pattern": self.options.queue_pattern.as_deref().unwrap_or(".*"),
                });
                let rows = self
                    .call(
                        "POST",
                        &format!(
                            "/api/queues/quorum/replicas/on/{}/grow",
                            percent_encode(node)
                        ),
                        Some(&body),
                    )
                    .await?;
                self.results(
                    format!("Growing {strategy} quorum queues onto {node}..."),
                    rows,
                    false,
                )
            }
            "shrink" => {
                let Some(node) = args.first() else {
                    return Err(CtlError::usage(
                        "shrink: usage: shrink NODE [--errors-only]",
                    ));
                };
                let rows = self
                    .call(
                        "DELETE",
                        &format!(
                            "/api/queues/quorum/replicas/on/{}/shrink",
                            percent_encode(node)
                        ),
                        None,
                    )
                    .await?;
                self.results(
                    format!("Shrinking quorum queues on {node}..."),
                    rows,
                    self.options.errors_only,
                )
            }
            "rebalance" => {
                let kind = args.first().map_or("quorum", String::as_str);
                if kind != "quorum" && kind != "all" {
                    return Err(CtlError::usage(
                        "rebalance: only quorum queues have leaders to move (quorum or all)",
                    ));
                }
                let answer = self.call("POST", "/api/rebalance/queues", None).await?;
                if self.options.json {
                    return Ok(answer.to_string() + "\n");
                }
                let mut out = self.banner("Re-balancing leaders of quorum queues...".into());
                for moved in answer["moves"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "{} in vhost {}: {} -> {}: {}\n",
                        cell(&moved["name"]),
                        cell(&moved["vhost"]),
                        cell(&moved["from"]),
                        cell(&moved["to"]),
                        cell(&moved["result"]),
                    ));
                }
                out.push_str("Node name\tNumber of quorum queue leaders\n");
                for (node, count) in answer["leaders"].as_object().into_iter().flatten() {
                    out.push_str(&format!("{node}\t{}\n", cell(count)));
                }
                Ok(out)
            }
            _ => self.quorum_critical().await,
        }
    }

    /// The result rows of grow and shrink, as rabbitmq-queues prints them.
    fn results(&self, banner: String, rows: Json, errors_only: bool) -> Result<String, CtlError> {
        let rows: Vec<Json> = rows
            .as_array()
            .into_iter()
            .flatten()
            .filter(|row| !errors_only || row["result"] != "ok")
            .cloned()
            .collect();
        if self.options.json {
            return Ok(serde_json::to_string_pretty(&rows).unwrap_or_default() + "\n");
        }
        let mut out = self.banner(banner);
        out.push_str("vhost\tname\tsize\tresult\n");
        for row in rows {
            out.push_str(&format!(
                "{}\t{}\t{}\t{}\n",
                cell(&row["vhost"]),
                cell(&row["name"]),
                cell(&row["size"]),
                cell(&row["result"])
            ));
        }
        Ok(out)
    }

    async fn quorum_critical(&self) -> Result<String, CtlError> {
        let credentials = (
            self.options.username.as_str(),
            self.options.password.as_str(),
        );
        let response = self
            .request_as(
                "GET",
                "/api/health/checks/node-is-quorum-critical",
                credentials,
                &[],
                None,
            )
            .await?;
        let body = response.json();
        match response.status {
            200 => Ok(self.banner(
                "Node is not quorum critical: no quorum queue would lose its majority if it stopped"
                    .to_string(),
            )),
            503 if body["queues"].is_array() => {
                let names: Vec<String> = body["queues"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|q| cell(&q["readable_name"]))
                    .collect();
                Err(CtlError {
                    message: format!(
                        "{}: {}",
                        body["reason"].as_str().unwrap_or("quorum critical"),
                        names.join(", ")
                    ),
                    exit_code: CHECK_FAILED,
                })
            }
            status => Err(CtlError::failed(format!(
                "GET /api/health/checks/node-is-quorum-critical: {} ({status})",
                body["reason"].as_str().unwrap_or("failed")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ctl::run;

    async fn usage_error(args: &[&str]) -> String {
        // Port 9 (discard): a verb that got as far as a request would fail with 69.
        let mut all = vec!["--port".to_string(), "9".to_string()];
        all.extend(args.iter().map(|s| s.to_string()));
        let error = run(&all, None).await.expect_err("a usage error");
        assert_eq!(error.exit_code, 64, "{args:?}: {error}");
        error.message
    }

    #[tokio::test]
    async fn quorum_verbs_check_their_arguments_before_asking_the_broker() {
        assert!(usage_error(&["quorum_status"])
            .await
            .contains("[VHOST] QUEUE"));
        assert!(usage_error(&["quorum_status", "a", "b", "c"])
            .await
            .contains("QUEUE"));
        assert!(usage_error(&["add_member", "q"])
            .await
            .contains("QUEUE NODE"));
        assert!(usage_error(&["transfer_leadership"])
            .await
            .contains("QUEUE NODE"));
        assert!(usage_error(&["grow", "warren@a"])
            .await
            .contains("all|even"));
        assert!(usage_error(&["shrink"]).await.contains("NODE"));
        assert!(usage_error(&["rebalance", "stream"])
            .await
            .contains("quorum"));
        // Well-formed: it gets as far as the (absent) broker.
        let mut args: Vec<String> = ["--port", "9", "delete_member", "/", "q", "warren@b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(run(&args, None).await.unwrap_err().exit_code, 69);
        args.truncate(2);
        args.push("check_if_node_is_quorum_critical".into());
        assert_eq!(run(&args, None).await.unwrap_err().exit_code, 69);
    }
}
