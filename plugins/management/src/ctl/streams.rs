//! warrenctl's super stream verbs, as rabbitmq-streams has them:
//! `add_super_stream NAME [--partitions N | --binding-keys a,b,c | --routing-keys a,b,c]
//! [--max-length-bytes SIZE] [--max-age ISO8601] [--stream-max-segment-size-bytes SIZE]`
//! (3 partitions when neither is given) and `delete_super_stream NAME`, in `-p`'s vhost
//! (`--vhost` too). They call `PUT` and `DELETE /api/stream/super-streams/VHOST/NAME`. The
//! `list_stream_*` verbs are list verbs (`listings.rs`).

use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Map, Value as Json};

use super::{Ctl, CtlError};
use crate::http::percent_encode;

/// A verb's outcome (`None`: not one of this module's verbs), boxed.
type VerbFuture<'a> = Pin<Box<dyn Future<Output = Option<Result<String, CtlError>>> + Send + 'a>>;

impl Ctl {
    /// Runs `command` if it is one of this module's verbs; `None` otherwise.
    pub(super) fn stream_command<'a>(
        &'a self,
        command: &'a str,
        args: &'a [String],
    ) -> VerbFuture<'a> {
        match command {
            "add_super_stream" => Box::pin(async move { Some(self.add_super_stream(args).await) }),
            "delete_super_stream" => {
                Box::pin(async move { Some(self.delete_super_stream(args).await) })
            }
            _ => Box::pin(std::future::ready(None)),
        }
    }

    fn super_stream_path(&self, name: &str) -> String {
        format!(
            "/api/stream/super-streams/{}/{}",
            self.vhost(),
            percent_encode(name)
        )
    }

    async fn add_super_stream(&self, args: &[String]) -> Result<String, CtlError> {
        let request = SuperStreamRequest::parse(args)?;
        self.call(
            "PUT",
            &self.super_stream_path(&request.name),
            Some(&request.body),
        )
        .await?;
        Ok(self.banner("Adding a super stream...".into()))
    }

    async fn delete_super_stream(&self, args: &[String]) -> Result<String, CtlError> {
        let [name] = args else {
            return Err(CtlError::usage("delete_super_stream NAME [--vhost VHOST]"));
        };
        self.call("DELETE", &self.super_stream_path(name), None)
            .await?;
        Ok(self.banner("Deleting a super stream...".into()))
    }
}

/// `add_super_stream`'s arguments as the API's body.
#[derive(Debug)]
struct SuperStreamRequest {
    name: String,
    body: Json,
}

impl SuperStreamRequest {
    fn parse(args: &[String]) -> Result<SuperStreamRequest, CtlError> {
        let mut name = None;
        let mut partitions: Option<i64> = None;
        let mut binding_keys: Option<String> = None;
        let mut arguments = Map::new();
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let mut value = || {
                iter.next()
                    .cloned()
                    .ok_or_else(|| CtlError::usage(format!("{arg} needs a value")))
            };
            match arg.as_str() {
                "--partitions" => {
                    let count = value()?;
                    partitions = Some(count.parse().map_err(|_| {
                        CtlError::usage(format!("--partitions needs a number, not '{count}'"))
                    })?);
                }
                "--binding-keys" | "--routing-keys" => {
                    if binding_keys.is_some() {
                        return Err(CtlError::usage("Specify --binding-keys only."));
                    }
                    binding_keys = Some(value()?);
                }
                "--max-length-bytes" => {
                    let size = value()?;
                    let bytes = information_unit(&size).ok_or_else(|| {
                        CtlError::usage(
                            "Invalid value for --max-length-bytes, valid example values: 100gb, 50mb",
                        )
                    })?;
                    arguments.insert("max-length-bytes".into(), json!(bytes));
                }
                "--stream-max-segment-size-bytes" => {
                    let size = value()?;
                    let bytes = information_unit(&size).ok_or_else(|| {
                        CtlError::usage(
                            "Invalid value for --stream-max-segment-size-bytes, valid example values: 100gb, 50mb",
                        )
                    })?;
                    arguments.insert("stream-max-segment-size-bytes".into(), json!(bytes));
                }
                "--max-age" => {
                    let age = value()?;
                    let seconds = iso8601_seconds(&age).ok_or_else(|| {
                        CtlError::usage(
                            "Invalid value for --max-age, the value must a ISO 8601 duration, e.g. PT10M30S for 10 minutes 30 seconds, P5DT8H for 5 days 8 hours.",
                        )
                    })?;
                    arguments.insert("max-age".into(), json!(format!("{seconds}s")));
                }
                flag if flag.starts_with("--") => {
                    return Err(CtlError::usage(format!(
                        "add_super_stream: unknown option {flag}"
                    )))
                }
                positional if name.is_none() => name = Some(positional.to_owned()),
                extra => {
                    return Err(CtlError::usage(format!(
                        "add_super_stream: too many arguments ({extra})"
                    )))
                }
            }
        }
        let name = name.ok_or_else(|| {
            CtlError::usage("add_super_stream NAME [--partitions N | --binding-keys a,b,c]")
        })?;
        let mut body = Map::new();
        match (partitions, binding_keys) {
            (Some(_), Some(_)) => {
                return Err(CtlError::usage(
                    "Specify --partitions or --binding-keys, not both.",
                ))
            }
            (Some(count), None) if count < 1 => {
                return Err(CtlError::usage(
                    "The partition number must be greater than 0",
                ))
            }
            (Some(count), None) => {
                body.insert("partitions".into(), json!(count));
            }
            (None, Some(keys)) => {
                body.insert("binding-keys".into(), json!(keys));
            }
            // rabbitmq-streams' default.
            (None, None) => {
                body.insert("partitions".into(), json!(3));
            }
        }
        if !arguments.is_empty() {
            body.insert("arguments".into(), Json::Object(arguments));
        }
        Ok(SuperStreamRequest {
            name,
            body: Json::Object(body),
        })
    }
}

/// A size as RabbitMQ's `parse_information_unit` reads it: a number with an optional
/// unit, `kb`/`mb`/`gb`/`tb` (powers of 1000) or `k`/`kib`/`m`/`mib`/... (powers of 1024).
fn information_unit(text: &str) -> Option<u64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.to_ascii_lowercase().as_str() {
        "" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// The seconds of an ISO 8601 duration, `P[nY][nM][nW][nD][T[nH][nM][nS]]` (a year 365
/// days, a month 30, as RabbitMQ's retention units count them).
fn iso8601_seconds(text: &str) -> Option<u64> {
    let rest = text.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) if !time.is_empty() => (date, Some(time)),
        Some(_) => return None,
        None => (rest, None),
    };
    let part = |text: &str, units: &[(char, u64)]| -> Option<u64> {
        let mut total = 0u64;
        let mut number = String::new();
        let mut allowed = units.iter();
        for c in text.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            // Units in order, each at most once.
            let (_, seconds) = allowed.by_ref().find(|(unit, _)| *unit == c)?;
            let value: u64 = number.parse().ok()?;
            total = total.checked_add(value.checked_mul(*seconds)?)?;
            number.clear();
        }
        number.is_empty().then_some(total)
    };
    const DAY: u64 = 86_400;
    let date_seconds = part(
        date,
        &[
            ('Y', 365 * DAY),
            ('M', 30 * DAY),
            ('W', 7 * DAY),
            ('D', DAY),
        ],
    )?;
    let time_seconds = match time {
        Some(time) => part(time, &[('H', 3_600), ('M', 60), ('S', 1)])?,
        None => 0,
    };
    if date.is_empty() && time.is_none() {
        return None;
    }
    date_seconds.checked_add(time_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sizes_and_durations_read_as_rabbitmq_streams_reads_them() {
        assert_eq!(information_unit("20gb"), Some(20_000_000_000));
        assert_eq!(information_unit("500MB"), Some(500_000_000));
        assert_eq!(information_unit("1k"), Some(1024));
        assert_eq!(information_unit("1000"), Some(1000));
        assert_eq!(information_unit("mb"), None);
        assert_eq!(information_unit("5xb"), None);
        assert_eq!(iso8601_seconds("PT10M30S"), Some(630));
        assert_eq!(iso8601_seconds("P5DT8H"), Some(5 * 86_400 + 8 * 3_600));
        assert_eq!(iso8601_seconds("P1Y"), Some(365 * 86_400));
        assert_eq!(iso8601_seconds("P"), None);
        assert_eq!(iso8601_seconds("PT"), None);
        assert_eq!(iso8601_seconds("10m"), None);
        assert_eq!(iso8601_seconds("PT5S10M"), None);
    }

    #[test]
    fn add_super_stream_arguments_become_the_api_body() {
        let parsed = SuperStreamRequest::parse(&args(&["orders"])).unwrap();
        assert_eq!(parsed.body, json!({"partitions": 3}));
        let parsed = SuperStreamRequest::parse(&args(&[
            "orders",
            "--routing-keys",
            "eu,us",
            "--max-length-bytes",
            "1mb",
            "--max-age",
            "PT1H",
        ]))
        .unwrap();
        assert_eq!(
            parsed.body,
            json!({"binding-keys": "eu,us", "arguments": {"max-length-bytes": 1_000_000, "max-age": "3600s"}})
        );
        for bad in [
            &["orders", "--partitions", "2", "--binding-keys", "a"][..],
            &["orders", "--partitions", "0"],
            &["orders", "--partitions", "x"],
            &["--partitions", "2"],
            &["orders", "extra"],
            &["orders", "--colour", "red"],
        ] {
            assert_eq!(
                SuperStreamRequest::parse(&args(bad)).unwrap_err().exit_code,
                64,
                "{bad:?}"
            );
        }
    }
}
