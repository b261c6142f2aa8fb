//! RabbitMQ's paged listings: `GET /api/queues?page=2&page_size=100&name=^orders&use_regex=true
//! &sort=messages&sort_reverse=true` answers one page as
//! `{"items": [...], "page", "page_size", "page_count", "item_count", "filtered_count",
//! "total_count"}`, so a client (the web UI) stays usable with 10,000 queues. Without `page`
//! a listing is the plain array it always was.
//!
//! Queues and exchanges are paged before their JSON is written ([`crate::Management`]'s
//! `list_per_vhost`, through the caller's [`PageQuery`]); a page of queues sorted by name (or
//! not sorted, what the web UI asks for) is cut from the names before any queue's JSON is
//! built ([`PageQuery::apply_named`]), so it costs the page's queues, not all of them. Every
//! other listing is paged from the array its handler wrote ([`page_listing`]), so every list
//! endpoint pages the same way.

use serde_json::{json, Value as Json};

use crate::http::{Request, Response};

/// Whether an item's name passes a listing's `name` filter.
type NameFilter = Box<dyn Fn(&str) -> bool>;

/// The largest `page_size` RabbitMQ accepts.
const MAX_PAGE_SIZE: usize = 500;

/// The paging query parameters, as RabbitMQ names them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PageQuery {
    /// 1-based page number.
    page: usize,
    /// Items per page (default 100, at most 500).
    page_size: usize,
    /// A name filter: a substring, or a regular expression with `use_regex`.
    name: Option<String>,
    /// Whether `name` is a regular expression.
    use_regex: bool,
    /// The field to sort by; dotted paths reach nested fields
    /// (`message_stats.publish_details.rate`).
    sort: Option<String>,
    /// Sort descending.
    sort_reverse: bool,
}

impl PageQuery {
    /// The paging the request asks for: `Ok(None)` without `page`, the 400 to answer for a
    /// bad value.
    pub(crate) fn from_request(request: &Request) -> Result<Option<PageQuery>, Response> {
        let Some(page) = request.query_param("page") else {
            return Ok(None);
        };
        let number = |name: &str, text: &str| {
            text.parse::<usize>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| {
                    super::bad_request(format!("{name} must be a positive integer, not '{text}'"))
                })
        };
        let page = number("page", &page)?;
        let page_size = match request.query_param("page_size") {
            Some(text) => number("page_size", &text)?,
            None => 100,
        };
        if page_size > MAX_PAGE_SIZE {
            return Err(super::bad_request(format!(
                "page_size must be between 1 and {MAX_PAGE_SIZE}"
            )));
        }
        let flag = |name: &str| {
            request
                .query_param(name)
                .is_some_and(|value| value == "true")
        };
        Ok(Some(PageQuery {
            page,
            page_size,
            name: request.query_param("name").filter(|name| !name.is_empty()),
            use_regex: flag("use_regex"),
            sort: request.query_param("sort").filter(|sort| !sort.is_empty()),
            sort_reverse: flag("sort_reverse"),
        }))
    }

    /// One page of `items` with RabbitMQ's counts, or the 400 for a bad regex or a page past
    /// the last.
    pub(crate) fn apply(&self, items: Vec<Json>) -> Result<Json, Response> {
        let total_count = items.len();
        let matcher = self.matcher()?;
        let mut filtered: Vec<Json> = items
            .into_iter()
            .filter(|item| matcher(item["name"].as_str().unwrap_or_default()))
            .collect();
        if let Some(sort) = &self.sort {
            let key = |item: &Json| -> Json {
                sort.split('.')
                    .fold(item, |value, field| &value[field])
                    .clone()
            };
            filtered.sort_by(|a, b| compare(&key(a), &key(b)));
        }
        self.page_of(filtered, total_count, |item| item)
    }
}

impl PageQuery {
    /// Whether the page depends on items' names alone (sorted by name, or in listing order):
    /// then [`PageQuery::apply_named`] can build only the page's JSON.
    pub(crate) fn needs_names_only(&self) -> bool {
        matches!(self.sort.as_deref(), None | Some("name"))
    }

    /// [`PageQuery::apply`] for a query that [needs names only](PageQuery::needs_names_only):
    /// `items` are `(name, what to build the item's JSON from)`, filtered and ordered by name
    /// as [`PageQuery::apply`] orders JSON items by their `name` (case-insensitively, stable),
    /// and `build` runs only for the items on the page. With 10,000 queues a page of 50 costs
    /// 50 queues' JSON, not 10,000.
    pub(crate) fn apply_named<T>(
        &self,
        items: Vec<(String, T)>,
        build: impl Fn(T) -> Json,
    ) -> Result<Json, Response> {
        debug_assert!(self.needs_names_only());
        let total_count = items.len();
        let matcher = self.matcher()?;
        let mut filtered: Vec<(String, T)> = items
            .into_iter()
            .filter(|(name, _)| matcher(name))
            .collect();
        if self.sort.is_some() {
            filtered.sort_by_cached_key(|(name, _)| name.to_lowercase());
        }
        self.page_of(filtered, total_count, |(_, item)| build(item))
    }

    /// Cuts the page out of `filtered` (already filtered and ordered; reversed here when
    /// asked), builds only its items, and wraps them in RabbitMQ's counts; the 400 for a page
    /// past the last.
    fn page_of<T>(
        &self,
        mut filtered: Vec<T>,
        total_count: usize,
        build: impl FnMut(T) -> Json,
    ) -> Result<Json, Response> {
        if self.sort_reverse {
            filtered.reverse();
        }
        let filtered_count = filtered.len();
        let page_count = filtered_count.div_ceil(self.page_size).max(1);
        if self.page > page_count {
            return Err(super::bad_request("page_out_of_range"));
        }
        let items: Vec<Json> = filtered
            .into_iter()
            .skip((self.page - 1) * self.page_size)
            .take(self.page_size)
            .map(build)
            .collect();
        Ok(json!({
            "filtered_count": filtered_count,
            "item_count": items.len(),
            "items": items,
            "page": self.page,
            "page_count": page_count,
            "page_size": self.page_size,
            "total_count": total_count,
        }))
    }

    /// The name filter: a regular expression with `use_regex`, else a case-insensitive
    /// substring; the 400 for a bad regular expression.
    fn matcher(&self) -> Result<NameFilter, Response> {
        Ok(match (&self.name, self.use_regex) {
            (None, _) => Box::new(|_| true),
            (Some(pattern), true) => {
                let regex = regex::Regex::new(pattern).map_err(|e| {
                    super::bad_request(format!("name is not a valid regular expression: {e}"))
                })?;
                Box::new(move |name| regex.is_match(name))
            }
            (Some(part), false) => {
                let part = part.to_lowercase();
                Box::new(move |name| name.to_lowercase().contains(&part))
            }
        })
    }
}

/// Orders JSON values: numbers by value, strings case-insensitively, missing (null) first.
fn compare(a: &Json, b: &Json) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x
            .as_f64()
            .unwrap_or_default()
            .partial_cmp(&y.as_f64().unwrap_or_default())
            .unwrap_or(Ordering::Equal),
        (Json::String(x), Json::String(y)) => x.to_lowercase().cmp(&y.to_lowercase()),
        (Json::Bool(x), Json::Bool(y)) => x.cmp(y),
        (Json::Null, Json::Null) => Ordering::Equal,
        (Json::Null, _) => Ordering::Less,
        (_, Json::Null) => Ordering::Greater,
        _ => a.to_string().cmp(&b.to_string()),
    }
}

/// Pages a handler's 200 listing when the request asks for a page; other responses pass.
pub(crate) fn page_listing(request: &Request, response: Response) -> Response {
    let query = match PageQuery::from_request(request) {
        Ok(Some(query)) => query,
        Ok(None) => return response,
        Err(refusal) => return refusal,
    };
    if response.status != 200 {
        return response;
    }
    // A listing paged already is an object, not an array, and passes unchanged.
    let Ok(Json::Array(items)) = serde_json::from_slice::<Json>(&response.body) else {
        return response;
    };
    match query.apply(items) {
        Ok(page) => Response::json(200, &page),
        Err(refusal) => refusal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request(query: &str) -> Request {
        Request {
            method: "GET".into(),
            path: "/api/queues".into(),
            query: query.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    fn queues(count: usize) -> Vec<Json> {
        (0..count)
            .map(|n| json!({"name": format!("q{n:03}"), "messages": (n * 7) % 10}))
            .collect()
    }

    #[test]
    fn paging_by_name_before_building_matches_paging_the_json() {
        let mut items = queues(57);
        items.extend([
            json!({"name": "Q-upper"}),
            json!({"name": "a"}),
            json!({"name": "Z"}),
        ]);
        for query in [
            "page=1&page_size=10",
            "page=2&page_size=10&sort=name",
            "page=1&page_size=7&sort=name&sort_reverse=true",
            "page=3&page_size=5&name=q0&sort=name",
            "page=1&page_size=100&name=%5Eq0%5B12%5D&use_regex=true&sort_reverse=true",
            "page=9&page_size=10",
        ] {
            let query = PageQuery::from_request(&request(query)).unwrap().unwrap();
            assert!(query.needs_names_only());
            let named: Vec<(String, Json)> = items
                .iter()
                .map(|item| (item["name"].as_str().unwrap().to_string(), item.clone()))
                .collect();
            let lazy = query.apply_named(named, |item| item);
            let eager = query.apply(items.clone());
            match (lazy, eager) {
                (Ok(lazy), Ok(eager)) => assert_eq!(lazy, eager, "{query:?}"),
                (Err(lazy), Err(eager)) => assert_eq!(lazy.body, eager.body),
                (lazy, eager) => {
                    panic!("{query:?}: {:?} against {:?}", lazy.is_ok(), eager.is_ok())
                }
            }
        }
        let by_messages = PageQuery::from_request(&request("page=1&sort=messages"))
            .unwrap()
            .unwrap();
        assert!(!by_messages.needs_names_only());
    }

    #[test]
    fn pages_filter_by_regex_and_sort_by_a_field() {
        let query = PageQuery::from_request(&request(
            "page=2&page_size=3&name=%5Eq0%5B0-1%5D&use_regex=true&sort=messages&sort_reverse=true",
        ))
        .unwrap()
        .unwrap();
        let page = query.apply(queues(50)).unwrap();
        assert_eq!(page["total_count"], 50);
        assert_eq!(page["filtered_count"], 20);
        assert_eq!(page["page_count"], 7);
        assert_eq!(page["item_count"], 3);
        let messages: Vec<u64> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["messages"].as_u64().unwrap())
            .collect();
        assert!(messages.windows(2).all(|w| w[0] >= w[1]), "{messages:?}");
    }

    #[test]
    fn bad_paging_is_a_400_and_no_page_leaves_the_listing_alone() {
        assert!(PageQuery::from_request(&request("page=0")).is_err());
        assert!(PageQuery::from_request(&request("page=1&page_size=501")).is_err());
        assert_eq!(PageQuery::from_request(&request("sort=name")), Ok(None));
        let query = PageQuery::from_request(&request("page=9"))
            .unwrap()
            .unwrap();
        assert!(query.apply(queues(5)).is_err());
        let query = PageQuery::from_request(&request("page=1&name=(&use_regex=true"))
            .unwrap()
            .unwrap();
        assert!(query.apply(queues(5)).is_err());
    }

    proptest! {
        #[test]
        fn pages_cover_every_filtered_item_once(count in 0usize..60, size in 1usize..20) {
            let mut seen = Vec::new();
            let mut page = 1;
            loop {
                let query = PageQuery::from_request(&request(&format!("page={page}&page_size={size}")))
                    .unwrap()
                    .unwrap();
                let answer = query.apply(queues(count)).unwrap();
                seen.extend(answer["items"].as_array().unwrap().iter().cloned());
                if page >= answer["page_count"].as_u64().unwrap() as usize {
                    break;
                }
                page += 1;
            }
            prop_assert_eq!(seen, queues(count));
        }
    }
}
