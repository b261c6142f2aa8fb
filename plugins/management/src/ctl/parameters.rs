//! warrenctl's topic permission and parameter verbs, as rabbitmqctl has them:
//! `set_topic_permissions USER EXCHANGE WRITE READ`, `clear_topic_permissions USER [EXCHANGE]`,
//! `set_parameter COMPONENT NAME VALUE`, `clear_parameter COMPONENT NAME`,
//! `set_global_parameter NAME VALUE`, `clear_global_parameter NAME` (their `list_*` verbs are
//! in the listings table).

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Value as Json};

use super::{Ctl, CtlError};
use crate::http::percent_encode;

/// A verb's outcome (`None`: not one of this module's verbs), boxed.
type VerbFuture<'a> = Pin<Box<dyn Future<Output = Option<Result<String, CtlError>>> + Send + 'a>>;

/// The verbs of this module.
const VERBS: [&str; 6] = [
    "set_topic_permissions",
    "clear_topic_permissions",
    "set_parameter",
    "clear_parameter",
    "set_global_parameter",
    "clear_global_parameter",
];

impl Ctl {
    /// Runs `command` if it is one of this module's verbs; `None` otherwise. The future is
    /// boxed here so callers hold only a pointer.
    pub(super) fn parameter_command<'a>(
        &'a self,
        command: &'a str,
        args: &'a [String],
    ) -> VerbFuture<'a> {
        if !VERBS.contains(&command) {
            return Box::pin(std::future::ready(None));
        }
        Box::pin(self.parameter_verb(command, args))
    }

    async fn parameter_verb(
        &self,
        command: &str,
        args: &[String],
    ) -> Option<Result<String, CtlError>> {
        let result = match command {
            "set_topic_permissions" => self.set_topic_permissions(args).await,
            "clear_topic_permissions" => self.clear_topic_permissions(args).await,
            "set_parameter" => self.set_parameter(args).await,
            "clear_parameter" => self.clear_parameter(args).await,
            "set_global_parameter" => self.set_global_parameter(args).await,
            "clear_global_parameter" => match required(args, 0, command, "parameter name") {
                Ok(name) => self
                    .call(
                        "DELETE",
                        &format!("/api/global-parameters/{}", percent_encode(&name)),
                        None,
                    )
                    .await
                    .map(|_| {
                        self.banner(format!("Clearing global runtime parameter \"{name}\" ..."))
                    }),
                Err(e) => Err(e),
            },
            _ => return None,
        };
        Some(result)
    }

    async fn set_topic_permissions(&self, args: &[String]) -> Result<String, CtlError> {
        let command = "set_topic_permissions";
        let user = required(args, 0, command, "user name")?;
        let body = json!({
            "exchange": required(args, 1, command, "exchange")?,
            "write": required(args, 2, command, "write pattern")?,
            "read": required(args, 3, command, "read pattern")?,
        });
        self.call(
            "PUT",
            &format!(
                "/api/topic-permissions/{}/{}",
                self.vhost(),
                percent_encode(&user)
            ),
            Some(&body),
        )
        .await?;
        Ok(self.banner(format!(
            "Setting topic permissions on \"{}\" for user \"{user}\" in vhost \"{}\" ...",
            body["exchange"].as_str().unwrap_or_default(),
            self.options.vhost
        )))
    }

    async fn clear_topic_permissions(&self, args: &[String]) -> Result<String, CtlError> {
        let user = required(args, 0, "clear_topic_permissions", "user name")?;
        let mut path = format!(
            "/api/topic-permissions/{}/{}",
            self.vhost(),
            percent_encode(&user)
        );
        let text = match args.get(1) {
            Some(exchange) => {
                path.push('/');
                path.push_str(&percent_encode(exchange));
                format!(
                    "Clearing topic permissions on \"{exchange}\" for user \"{user}\" in vhost \"{}\" ...",
                    self.options.vhost
                )
            }
            None => format!(
                "Clearing topic permissions for user \"{user}\" in vhost \"{}\" ...",
                self.options.vhost
            ),
        };
        self.call("DELETE", &path, None).await?;
        Ok(self.banner(text))
    }

    async fn set_parameter(&self, args: &[String]) -> Result<String, CtlError> {
        let command = "set_parameter";
        let component = required(args, 0, command, "component")?;
        let name = required(args, 1, command, "parameter name")?;
        let value = json_value(&required(args, 2, command, "value")?)?;
        self.call(
            "PUT",
            &format!(
                "/api/parameters/{}/{}/{}",
                percent_encode(&component),
                self.vhost(),
                percent_encode(&name)
            ),
            Some(&json!({"component": component, "vhost": self.options.vhost,
                         "name": name, "value": value})),
        )
        .await?;
        Ok(self.banner(format!(
            "Setting runtime parameter \"{name}\" for component \"{component}\" to \"{value}\" in vhost \"{}\" ...",
            self.options.vhost
        )))
    }

    async fn clear_parameter(&self, args: &[String]) -> Result<String, CtlError> {
        let component = required(args, 0, "clear_parameter", "component")?;
        let name = required(args, 1, "clear_parameter", "parameter name")?;
        self.call(
            "DELETE",
            &format!(
                "/api/parameters/{}/{}/{}",
                percent_encode(&component),
                self.vhost(),
                percent_encode(&name)
            ),
            None,
        )
        .await?;
        Ok(self.banner(format!(
            "Clearing runtime parameter \"{name}\" for component \"{component}\" on vhost \"{}\" ...",
            self.options.vhost
        )))
    }

    async fn set_global_parameter(&self, args: &[String]) -> Result<String, CtlError> {
        let name = required(args, 0, "set_global_parameter", "parameter name")?;
        let value = json_value(&required(args, 1, "set_global_parameter", "value")?)?;
        self.call(
            "PUT",
            &format!("/api/global-parameters/{}", percent_encode(&name)),
            Some(&json!({"name": name, "value": value})),
        )
        .await?;
        Ok(self.banner(format!(
            "Setting global runtime parameter \"{name}\" to \"{value}\" ..."
        )))
    }
}

fn required(args: &[String], index: usize, command: &str, name: &str) -> Result<String, CtlError> {
    args.get(index)
        .cloned()
        .ok_or_else(|| CtlError::usage(format!("{command}: missing {name}")))
}

/// A parameter value as rabbitmqctl takes it: JSON text.
fn json_value(text: &str) -> Result<Json, CtlError> {
    serde_json::from_str(text).map_err(|e| CtlError {
        message: format!("value is not valid JSON: {e}"),
        exit_code: 65,
    })
}
