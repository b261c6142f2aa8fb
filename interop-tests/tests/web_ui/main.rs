//! The web UI in a real browser: Debian's chromium, headless, driven through chromium-driver
//! (WebDriver, with the fantoccini client) against a broker each test starts. Screenshots are
//! kept under `target/tmp/web-ui-screenshots/`.
//!
//! - [`forms`]: log in through the form, every page shows the broker's real objects and every
//!   form does what it says; a user without tags cannot log in;
//! - [`protocols`]: connections of every protocol listed and closed, channels, consumers and
//!   rates, listeners of every protocol, charts drawn from the rate history, memory and disk
//!   alarms;
//! - [`admin`]: users' tags, passwords and deletion, operator policies, the exported file's
//!   content, and what each management tag may see;
//! - [`layout`]: every control labelled, the pages used from the keyboard alone, no page wider
//!   than the window at 1280x800 or at phone width;
//! - [`load`]: page load times with 10,000 queues and 1,000 connections.
//!
//! Without chromium and chromium-driver each test prints why it was skipped (CI installs them,
//! and there a missing browser is a failure).

mod admin;
mod browser;
mod forms;
mod layout;
mod load;
mod protocols;
#[path = "../raw_common/mod.rs"]
mod raw_common;
