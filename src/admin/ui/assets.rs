//! Static assets embedded in the binary: the vendored htmx (`static/htmx-2.0.11.min.js`,
//! 0BSD, see `static/htmx.LICENSE`) and the stylesheet. No CDN, no build step: the pages
//! work on a closed network and the binary is the whole deployment.

use actix_web::{web, HttpResponse};

const HTMX: &str = include_str!("static/htmx-2.0.11.min.js");
const CSS: &str = include_str!("static/app.css");

/// URL of htmx; the version in the name lets browsers cache it for good.
pub const HTMX_PATH: &str = "/assets/htmx-2.0.11.min.js";
/// URL of the stylesheet; the crate version in the query busts caches after an upgrade.
pub const CSS_PATH: &str = concat!("/assets/app.css?v=", env!("CARGO_PKG_VERSION"));

/// `GET /assets/{name}`.
pub async fn serve(name: web::Path<String>) -> HttpResponse {
    let (body, kind, cache) = match name.as_str() {
        "htmx-2.0.11.min.js" => (
            HTMX,
            "text/javascript; charset=utf-8",
            "public, max-age=31536000, immutable",
        ),
        "app.css" => (CSS, "text/css; charset=utf-8", "public, max-age=3600"),
        _ => return HttpResponse::NotFound().finish(),
    };
    HttpResponse::Ok()
        .content_type(kind)
        .insert_header(("Cache-Control", cache))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(body)
}
