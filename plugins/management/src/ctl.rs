//! warrenctl placeholder.
