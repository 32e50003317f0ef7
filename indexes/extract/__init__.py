"""Text, layout provenance and metadata out of PDF, DOCX and HTML files (no network, no models)."""
