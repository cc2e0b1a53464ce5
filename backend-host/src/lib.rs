//! Host memory regions for the `tagalloc` core.
//!
//! This crate will supply regions from the operating system to the tagalloc core through its
//! region-source trait: anonymous `mmap` mappings, pinned pages locked with `mlock`, and huge
//! pages where the system offers them. Nothing is implemented yet.
