"""The SQL route: table schemas, the read-only guard and the question-to-SQL translator."""
