//! Rebuilds the binary when a migration is added or changed: `embed_migrations!` reads the
//! folder at compile time, and cargo does not watch it on its own.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
