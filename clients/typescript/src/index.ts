/**
 * @outbox-relay/consumer: reads the Redis Streams that outbox-relay writes, as a member of a
 * consumer group, with the Rust library's guarantees and protocol (docs/protocol.md).
 */

export { Consumer, Batches, shutdownSignal, lanes } from "./consumer.js";
export type { BatchHandlerFn, BatchHandlerObject, ClientOptions, Handler, HandlerFn, HandlerObject, RunOptions, RunStats } from "./consumer.js";
export { ConfigError, parseDuration, isValidTopic, resolveConfig } from "./config.js";
export type { ConsumerConfig, ConsumerOptions, Duration, Logger } from "./config.js";
export { parseEntry, EntryError, entryToJSON, parseUuid, FIELDS } from "./entry.js";
export type { Entry, Lease, CloudEvent, EntryErrorCode, FieldValue, ParseOptions } from "./entry.js";
export { HandlerError } from "./errors.js";
export type { ErrorKind } from "./errors.js";
export { murmur2, partitionFor, MAX_PARTITIONS } from "./partition.js";
export { Inbox, BatchInbox, ensureTables, applyOnce, applyBatchOnce, raiseFence, FenceError, TABLE_SQL, FENCES_SQL } from "./inbox.js";
export type { Effect, BatchEffect, InboxOptions, Applied } from "./inbox.js";
export { targets as fleetTargets } from "./fleet.js";
export { METRICS } from "./telemetry.js";
export { PROTOCOL_VERSION, PROTOCOL_DIR } from "./protocol.js";
export * as keys from "./keys.js";
