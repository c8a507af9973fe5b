"""The .lite model format: flatbuffers schema, generated code, reader and writer."""
