//! RabbitMQ's `columns` query parameter: `GET /api/queues?columns=name,messages,
//! message_stats.publish` answers each object with only those fields (dotted names reach
//! nested ones, which keep their nesting). rabbitmqadmin sends it for every `list` with
//! columns, and monitoring scripts use it to keep big listings small. It applies to plain
//! listings, to the `items` of a paged one, and to a single object; a field an object does
//! not have is left out.

use serde_json::{Map, Value as Json};

use crate::http::{Request, Response};

/// The column paths a `columns` value names (`a,b.c` -> `[["a"], ["b", "c"]]`).
fn parse(columns: &str) -> Vec<Vec<&str>> {
    columns
        .split(',')
        .map(str::trim)
        .filter(|column| !column.is_empty())
        .map(|column| column.split('.').collect::<Vec<_>>())
        .filter(|path| path.iter().all(|part| !part.is_empty()))
        .collect()
}

fn lookup<'a>(value: &'a Json, path: &[&str]) -> Option<&'a Json> {
    path.iter().try_fold(value, |value, key| value.get(*key))
}

fn insert(out: &mut Map<String, Json>, path: &[&str], value: Json) {
    match path {
        [] => {}
        [last] => {
            out.insert((*last).to_string(), value);
        }
        [first, rest @ ..] => {
            let entry = out
                .entry((*first).to_string())
                .or_insert_with(|| Json::Object(Map::new()));
            if let Json::Object(inner) = entry {
                insert(inner, rest, value);
            }
        }
    }
}

/// `value` with only the fields `paths` name; a value that is not an object is kept whole.
fn pick(value: &Json, paths: &[Vec<&str>]) -> Json {
    if !value.is_object() {
        return value.clone();
    }
    let mut out = Map::new();
    for path in paths {
        if let Some(found) = lookup(value, path) {
            insert(&mut out, path, found.clone());
        }
    }
    Json::Object(out)
}

/// Applies the request's `columns` to a successful JSON answer.
pub(crate) fn select_columns(request: &Request, response: Response) -> Response {
    let Some(columns) = request.query_param("columns") else {
        return response;
    };
    let paths = parse(&columns);
    if paths.is_empty() || response.status != 200 {
        return response;
    }
    let Ok(json) = serde_json::from_slice::<Json>(&response.body) else {
        return response;
    };
    let selected = match json {
        Json::Array(items) => Json::Array(items.iter().map(|item| pick(item, &paths)).collect()),
        Json::Object(mut page) if page.contains_key("page") && page.contains_key("items") => {
            if let Some(Json::Array(items)) = page.get_mut("items") {
                for item in items.iter_mut() {
                    *item = pick(item, &paths);
                }
            }
            Json::Object(page)
        }
        other => pick(&other, &paths),
    };
    Response::json(200, &selected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn nested_columns_keep_their_nesting_and_missing_ones_are_left_out() {
        let queue = json!({"name": "q", "messages": 3, "durable": true,
            "message_stats": {"publish": 7, "ack": 2}});
        let paths = parse("name, message_stats.publish,nowhere,,a..b");
        assert_eq!(
            pick(&queue, &paths),
            json!({"name": "q", "message_stats": {"publish": 7}})
        );
        assert_eq!(pick(&json!("text"), &paths), json!("text"));
    }

    proptest! {
        /// Any column list and object: no panic, and every field kept was asked for.
        #[test]
        fn picking_never_panics_and_keeps_only_what_was_named(
            columns in "[a-z.,]{0,24}",
            keys in proptest::collection::vec("[a-z]{1,3}", 0..6),
        ) {
            let object: Map<String, Json> =
                keys.iter().map(|k| (k.clone(), json!({"x": 1}))).collect();
            let paths = parse(&columns);
            let picked = pick(&Json::Object(object), &paths);
            for key in picked.as_object().unwrap().keys() {
                prop_assert!(paths.iter().any(|path| path[0] == key));
            }
        }
    }
}
