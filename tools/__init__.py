"""Tools of the memq project that are not part of the installed product (GPU check archive readers)."""
