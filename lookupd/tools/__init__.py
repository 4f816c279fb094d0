"""The `lookupd` command and what only it uses: dump, demo data, index recovery and verification,
progress output, and the Kafka-compatible writer (the one place, with recover, that writes files).
"""
