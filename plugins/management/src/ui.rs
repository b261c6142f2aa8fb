//! The web UI: three static files (plain HTML, CSS and JavaScript in `plugins/management/ui/`)
//! compiled into the binary, served at `/` by the management listener without a login: the
//! page logs in to the public API itself (basic auth against `/api/whoami`) and builds every
//! view from `/api/...` answers, so it works with no internet access and no build step.

use crate::http::{Request, Response};

const INDEX: &str = include_str!("../ui/index.html");
const SCRIPT: &str = include_str!("../ui/app.js");
const STYLE: &str = include_str!("../ui/app.css");

/// The UI's file for a `GET` (or `HEAD`) of `request`'s path, or `None` when the path is not
/// one of them.
pub fn serve(request: &Request) -> Option<Response> {
    if request.method != "GET" && request.method != "HEAD" {
        return None;
    }
    let (content_type, body) = match request.path.as_str() {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX),
        "/app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/app.css" => ("text/css; charset=utf-8", STYLE),
        _ => return None,
    };
    let mut response = Response::text(200, content_type, body.to_string());
    response.headers.extend([
        ("cache-control", "no-cache".to_string()),
        ("x-content-type-options", "nosniff".to_string()),
        (
            "content-security-policy",
            "default-src 'self'; img-src 'self' blob: data:; style-src 'self' 'unsafe-inline'; \
             frame-ancestors 'none'"
                .to_string(),
        ),
    ]);
    Some(response)
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
    fn the_page_and_its_assets_are_served_and_nothing_else() {
        let page = serve(&get("/")).expect("index");
        assert!(page.content_type.starts_with("text/html"));
        let html = String::from_utf8(page.body).unwrap();
        assert!(html.contains("app.js") && html.contains("app.css"));
        assert!(html.contains(r#"<label for="login-username">"#));
        assert!(serve(&get("/app.js"))
            .unwrap()
            .content_type
            .starts_with("text/javascript"));
        assert!(serve(&get("/app.css")).is_some());
        assert!(serve(&get("/api/overview")).is_none());
        assert!(serve(&get("/etc/passwd")).is_none());
        let post = Request {
            method: "POST".into(),
            ..get("/")
        };
        assert!(serve(&post).is_none());
    }

    #[test]
    fn the_assets_load_nothing_from_elsewhere() {
        for asset in [INDEX, SCRIPT, STYLE] {
            assert!(!asset.contains("http://") || asset.contains("http://www.w3.org/2000/svg"));
            assert!(!asset.contains("https://"));
        }
    }
}
