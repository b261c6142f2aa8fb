//! warrenctl's quorum queue verbs, as rabbitmq-queues and rabbitmq-diagnostics have them:
//! `quorum_status [VHOST] QUEUE` and `check_if_node_is_quorum_critical`. Without VHOST the
//! queue is in `-p`'s vhost.

use std::future::Future;
use std::pin::Pin;

use super::{cell, Ctl, CtlError};
use crate::http::percent_encode;

/// A verb's outcome (`None`: not one of this module's verbs), boxed.
type VerbFuture<'a> = Pin<Box<dyn Future<Output = Option<Result<String, CtlError>>> + Send + 'a>>;

/// The verbs of this module.
const VERBS: [&str; 2] = ["quorum_status", "check_if_node_is_quorum_critical"];

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
            _ => self.quorum_critical().await,
        }
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
