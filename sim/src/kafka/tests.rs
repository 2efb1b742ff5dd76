//! Tests of the Kafka model, one per line of models-reference checklist A.
