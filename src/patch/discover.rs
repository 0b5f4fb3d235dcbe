//! Discovery of the patch tree: common, role and node folders, each sorted by file name.
