//! A stream's settings from its arguments, and retention: which whole segments to delete.
//!
//! Retention works segment by segment, as RabbitMQ's does: a segment goes once the ones
//! after it are enough for `x-max-length-bytes`, or once its newest chunk is older than
//! `x-max-age`; the newest segment always stays, so a stream is never emptied by retention.

use std::time::Duration;

/// Default largest segment file: 500 MB, as RabbitMQ's `x-stream-max-segment-size-bytes`.
pub const DEFAULT_MAX_SEGMENT_SIZE: u64 = 500_000_000;

/// A stream's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettings {
    /// `x-stream-max-segment-size-bytes`: a segment is closed once it would grow past this.
    pub max_segment_size: u64,
    /// `x-max-length-bytes`: the most bytes kept, counted in whole segments.
    pub max_length_bytes: Option<u64>,
    /// `x-max-age`: how long a segment is kept after its newest chunk was written.
    pub max_age: Option<Duration>,
    /// The arguments as given, kept with the stream and shown by the management API.
    pub arguments: Vec<(String, String)>,
}

impl Default for StreamSettings {
    fn default() -> StreamSettings {
        StreamSettings {
            max_segment_size: DEFAULT_MAX_SEGMENT_SIZE,
            max_length_bytes: None,
            max_age: None,
            arguments: Vec::new(),
        }
    }
}

/// Parses RabbitMQ's `x-max-age` (`7D`, `12h`, `30m`, `10s`, `1M`, `1Y`): a positive whole
/// number and one unit (Y = 365 days, M = 30 days, D, h, m, s).
pub fn parse_max_age(text: &str) -> Result<Duration, String> {
    let unit_at = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| {
        format!("invalid x-max-age '{text}': a number and a unit (Y, M, D, h, m, s)")
    })?;
    let (number, unit) = text.split_at(unit_at);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("invalid x-max-age '{text}': it must start with a whole number"))?;
    let seconds = match unit {
        "Y" => 365 * 86_400,
        "M" => 30 * 86_400,
        "D" => 86_400,
        "h" => 3_600,
        "m" => 60,
        "s" => 1,
        _ => {
            return Err(format!(
                "invalid x-max-age '{text}': the unit must be one of Y, M, D, h, m, s"
            ))
        }
    };
    if number == 0 {
        return Err(format!("invalid x-max-age '{text}': it must be positive"));
    }
    Ok(Duration::from_secs(number.saturating_mul(seconds)))
}

fn positive(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("invalid arg '{key}': '{value}' is not a positive integer"))
}

impl StreamSettings {
    /// Settings from `(key, value)` arguments (the stream protocol's `Create`, or queue
    /// arguments written as text). Unknown keys are kept and ignored, as RabbitMQ ignores
    /// arguments it has no use for.
    pub fn from_arguments(arguments: &[(String, String)]) -> Result<StreamSettings, String> {
        let mut settings = StreamSettings {
            arguments: arguments.to_vec(),
            ..StreamSettings::default()
        };
        for (key, value) in arguments {
            match key.as_str() {
                "x-stream-max-segment-size-bytes" | "stream-max-segment-size-bytes" => {
                    settings.max_segment_size = positive(key, value)?;
                }
                "x-max-length-bytes" | "max-length-bytes" => {
                    settings.max_length_bytes = Some(positive(key, value)?);
                }
                "x-max-age" | "max-age" => settings.max_age = Some(parse_max_age(value)?),
                _ => {}
            }
        }
        Ok(settings)
    }

    /// Whether nothing bounds the stream (it grows until the disk is full).
    pub fn unbounded(&self) -> bool {
        self.max_length_bytes.is_none() && self.max_age.is_none()
    }
}

/// Retention and segment size set by a policy (`max-age`, `max-length-bytes`,
/// `stream-max-segment-size-bytes`), which win over the stream's arguments, as RabbitMQ's
/// policy precedence for streams has it; `None` leaves the argument in force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyLimits {
    /// `stream-max-segment-size-bytes`.
    pub max_segment_size: Option<u64>,
    /// `max-length-bytes`.
    pub max_length_bytes: Option<u64>,
    /// `max-age`.
    pub max_age: Option<Duration>,
}

impl StreamSettings {
    /// These settings with `limits` in place of the arguments they set.
    pub fn with_policy(&self, limits: &PolicyLimits) -> StreamSettings {
        StreamSettings {
            max_segment_size: limits.max_segment_size.unwrap_or(self.max_segment_size),
            max_length_bytes: limits.max_length_bytes.or(self.max_length_bytes),
            max_age: limits.max_age.or(self.max_age),
            arguments: self.arguments.clone(),
        }
    }
}

/// What retention needs to know about a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentFacts {
    /// Bytes on disk.
    pub size: u64,
    /// Timestamp (ms) of its newest chunk; `None` while it holds none.
    pub newest_timestamp: Option<i64>,
}

/// How many of the oldest segments (`segments` is oldest first) retention deletes at
/// `now_ms`. The newest segment is always kept.
pub fn segments_to_delete(
    segments: &[SegmentFacts],
    settings: &StreamSettings,
    now_ms: i64,
) -> usize {
    if segments.len() <= 1 {
        return 0;
    }
    let mut delete = 0;
    if let Some(max_age) = settings.max_age {
        let cutoff = now_ms.saturating_sub(max_age.as_millis() as i64);
        while delete < segments.len() - 1
            && segments[delete]
                .newest_timestamp
                .is_some_and(|t| t < cutoff)
        {
            delete += 1;
        }
    }
    if let Some(max_bytes) = settings.max_length_bytes {
        let mut total: u64 = segments[delete..].iter().map(|s| s.size).sum();
        while delete < segments.len() - 1 && total > max_bytes {
            total -= segments[delete].size;
            delete += 1;
        }
    }
    delete
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_wins_over_the_arguments_it_sets() {
        let settings = StreamSettings::from_arguments(&[
            ("x-max-age".into(), "7D".into()),
            ("x-max-length-bytes".into(), "1000".into()),
        ])
        .unwrap();
        let limits = PolicyLimits {
            max_length_bytes: Some(10),
            max_segment_size: Some(4096),
            max_age: None,
        };
        let effective = settings.with_policy(&limits);
        assert_eq!(effective.max_length_bytes, Some(10));
        assert_eq!(effective.max_segment_size, 4096);
        assert_eq!(effective.max_age, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(settings.with_policy(&PolicyLimits::default()), settings);
    }

    #[test]
    fn max_age_takes_rabbitmq_units() {
        assert_eq!(
            parse_max_age("7D").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(
            parse_max_age("1Y").unwrap(),
            Duration::from_secs(365 * 86_400)
        );
        assert_eq!(
            parse_max_age("2M").unwrap(),
            Duration::from_secs(60 * 86_400)
        );
        assert_eq!(
            parse_max_age("12h").unwrap(),
            Duration::from_secs(12 * 3_600)
        );
        assert_eq!(parse_max_age("30m").unwrap(), Duration::from_secs(1_800));
        assert_eq!(parse_max_age("10s").unwrap(), Duration::from_secs(10));
        for bad in ["", "7", "D", "7d", "0s", "-1s", "1.5h", "7 D"] {
            assert!(parse_max_age(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn arguments_set_the_settings_and_bad_values_are_refused() {
        let args = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        let settings = StreamSettings::from_arguments(&args(&[
            ("x-max-length-bytes", "1000"),
            ("x-max-age", "1h"),
            ("x-stream-max-segment-size-bytes", "100"),
            ("x-queue-leader-locator", "least-leaders"),
        ]))
        .unwrap();
        assert_eq!(settings.max_length_bytes, Some(1000));
        assert_eq!(settings.max_age, Some(Duration::from_secs(3600)));
        assert_eq!(settings.max_segment_size, 100);
        assert!(!settings.unbounded());
        assert!(StreamSettings::from_arguments(&args(&[("x-max-length-bytes", "x")])).is_err());
        assert!(StreamSettings::from_arguments(&args(&[("x-max-age", "1w")])).is_err());
        assert!(StreamSettings::from_arguments(&[]).unwrap().unbounded());
    }

    #[test]
    fn retention_deletes_whole_oldest_segments_and_keeps_the_newest() {
        let facts = |size, newest| SegmentFacts {
            size,
            newest_timestamp: Some(newest),
        };
        let segments = [facts(100, 10), facts(100, 20), facts(100, 30)];
        let by_size = StreamSettings {
            max_length_bytes: Some(150),
            ..StreamSettings::default()
        };
        assert_eq!(segments_to_delete(&segments, &by_size, 0), 2);
        let by_size = StreamSettings {
            max_length_bytes: Some(200),
            ..by_size
        };
        assert_eq!(segments_to_delete(&segments, &by_size, 0), 1);
        let by_age = StreamSettings {
            max_age: Some(Duration::from_millis(15)),
            ..StreamSettings::default()
        };
        assert_eq!(segments_to_delete(&segments, &by_age, 40), 2);
        assert_eq!(
            segments_to_delete(&segments, &by_age, 1000),
            2,
            "the newest stays"
        );
        assert_eq!(segments_to_delete(&segments[..1], &by_size, 0), 0);
    }
}
