//! The Warren server: assembles the core, the configured listeners and the plugins.
