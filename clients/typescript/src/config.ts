/**
 * The consumer's settings: every one with its default (the Rust library's), checked when the
 * {@link Consumer} is built, before anything connects. A wrong setting is a
 * {@link ConfigError} naming it.
 */

import { hostname } from "node:os";
import * as keys from "./keys.js";

/** A duration: milliseconds, or text such as `"200ms"`, `"30s"`, `"1m30s"`, `"2h"`. */
export type Duration = number | string;

/** A logger; `console` fits. Lines are one message and an object of fields. */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** What a consumer is told: see each setting. */
export interface ConsumerOptions {
  /** `redis://host:port[/db]` or `rediss://...`. */
  redisUrl: string;
  /** The topic to consume (or `topics`). */
  topic?: string;
  /** Several topics read by one consumer: one XREADGROUP over their streams. */
  topics?: string[];
  /** The consumer group; created from the start of each stream when missing. */
  group: string;
  /** This consumer's name in the group; keep it across restarts. Default `<hostname>-<pid>`. */
  consumer?: string;
  /** The relay's `redis.stream_prefix`. Default `outbox:`. */
  streamPrefix?: string;
  /** COUNT of each XREADGROUP. Default 100. */
  batchSize?: number;
  /** BLOCK of each XREADGROUP; also the longest a stop waits for the read. Default 2s. */
  block?: Duration;
  /** Entries idle this long in another consumer's hands are claimed; also the partition lease. Default 30s. */
  claimIdle?: Duration;
  /** Deliveries after which a failing entry is dead-lettered. Default 5. */
  maxDeliveries?: number;
  /** Lanes (partition keys) handled at once. Default 16. */
  concurrency?: number;
  /** First retry delay of a failed entry, doubling with jitter. Default 200ms. */
  retryBase?: Duration;
  /** Cap of the retry delay; keep it below `claimIdle`. Default 10s. */
  retryMax?: Duration;
  /** Park a key in the group once one of its entries is dead-lettered. Default false. */
  parkKeys?: boolean;
  /** Where the consumer logs. Default: warnings and info to stderr, as JSON lines. */
  logger?: Logger;
}

/** The settings, checked, durations in milliseconds. */
export interface ConsumerConfig {
  redisUrl: string;
  topics: string[];
  group: string;
  consumer: string;
  streamPrefix: string;
  batchSize: number;
  blockMs: number;
  claimIdleMs: number;
  maxDeliveries: number;
  concurrency: number;
  retryBaseMs: number;
  retryMaxMs: number;
  parkKeys: boolean;
}

/** A setting that cannot work. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  constructor(
    /** The setting's name, as in {@link ConsumerOptions}. */
    readonly setting: string,
    /** What is wrong with it. */
    readonly reason: string,
  ) {
    super(`invalid consumer setting \`${setting}\`: ${reason}`);
  }
}

const UNITS: Record<string, number> = {
  ms: 1,
  msec: 1,
  s: 1000,
  sec: 1000,
  secs: 1000,
  m: 60_000,
  min: 60_000,
  mins: 60_000,
  h: 3_600_000,
  hr: 3_600_000,
  d: 86_400_000,
};

/** A duration in milliseconds: a number as is, text as `<n><unit>...` (humantime's units); `null` when it is not one. */
export function parseDuration(value: unknown): number | null {
  if (typeof value === "number") return Number.isFinite(value) && value >= 0 ? value : null;
  if (typeof value !== "string") return null;
  const text = value.trim();
  if (text === "") return null;
  let total = 0;
  let rest = text;
  while (rest.length > 0) {
    const m = /^(\d+(?:\.\d+)?)\s*([a-z]+)\s*/.exec(rest);
    if (!m) return null;
    const unit = UNITS[m[2] as string];
    if (unit === undefined) return null;
    total += Number(m[1]) * unit;
    rest = rest.slice(m[0].length);
  }
  return total;
}

const TOPIC_RULE = "1 to 255 characters, no whitespace or control characters";
// Rust's char::is_whitespace and char::is_control.
// eslint-disable-next-line no-control-regex
const BAD_CHAR = /[\s\u0000-\u001f\u007f-\u009f\u0085\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;

/** Whether `topic` follows the relay's topic rule. */
export function isValidTopic(topic: unknown): topic is string {
  if (typeof topic !== "string") return false;
  const length = [...topic].length;
  return length >= 1 && length <= 255 && !BAD_CHAR.test(topic);
}

function defaultConsumerName(): string {
  return `${hostname() || "consumer"}-${process.pid}`;
}

function bad(setting: string, reason: string): never {
  throw new ConfigError(setting, reason);
}

function integer(options: ConsumerOptions, setting: keyof ConsumerOptions, fallback: number, min: number): number {
  const value = options[setting] ?? fallback;
  if (typeof value !== "number" || !Number.isInteger(value)) bad(setting, "a whole number");
  if (value < min) bad(setting, `at least ${min}`);
  return value;
}

function duration(options: ConsumerOptions, setting: keyof ConsumerOptions, fallback: number): number {
  const raw = options[setting] ?? fallback;
  const ms = parseDuration(raw);
  if (ms === null) bad(setting, `a duration: milliseconds, or text like "200ms", "30s", "1m" (got ${JSON.stringify(raw)})`);
  return ms;
}

/** Checks every setting and fills in the defaults; throws a {@link ConfigError} naming the first bad one. */
export function resolveConfig(options: ConsumerOptions): ConsumerConfig {
  if (typeof options !== "object" || options === null) bad("options", "an object of settings");
  const url = options.redisUrl;
  if (typeof url !== "string" || url.trim() === "") bad("redisUrl", "required: redis:// or rediss://");
  if (!url.startsWith("redis://") && !url.startsWith("rediss://")) bad("redisUrl", "must start with redis:// or rediss://");
  if (options.topic !== undefined && options.topics !== undefined) bad("topics", "either `topic` or `topics`, not both");
  const topics = options.topics ?? (options.topic !== undefined ? [options.topic] : []);
  if (!Array.isArray(topics) || topics.length === 0) bad(options.topics ? "topics" : "topic", "at least one topic");
  topics.forEach((topic, i) => {
    const setting = options.topics ? "topics" : "topic";
    if (!isValidTopic(topic)) bad(setting, `each ${TOPIC_RULE}`);
    if (topics.slice(0, i).includes(topic)) bad(setting, "each topic once");
  });
  const consumer = options.consumer ?? defaultConsumerName();
  for (const [setting, value] of [
    ["group", options.group],
    ["consumer", consumer],
  ] as const) {
    if (typeof value !== "string" || value === "" || BAD_CHAR.test(value)) {
      bad(setting, "1 or more characters, no whitespace");
    }
  }
  const streamPrefix = options.streamPrefix ?? "outbox:";
  if (typeof streamPrefix !== "string") bad("streamPrefix", "text");
  const batchSize = integer(options, "batchSize", 100, 1);
  const concurrency = integer(options, "concurrency", 16, 1);
  const maxDeliveries = integer(options, "maxDeliveries", 5, 1);
  const blockMs = duration(options, "block", 2000);
  if (blockMs < 1) bad("block", "more than 0");
  const claimIdleMs = duration(options, "claimIdle", 30_000);
  if (claimIdleMs < 100) bad("claimIdle", "at least 100ms");
  const retryBaseMs = duration(options, "retryBase", 200);
  const retryMaxMs = duration(options, "retryMax", 10_000);
  if (retryBaseMs <= 0 || retryMaxMs < retryBaseMs) bad("retryBase", "more than 0 and at most retryMax");
  const parkKeys = options.parkKeys ?? false;
  if (typeof parkKeys !== "boolean") bad("parkKeys", "true or false");
  return {
    redisUrl: url,
    topics,
    group: options.group,
    consumer,
    streamPrefix,
    batchSize,
    blockMs: Math.round(blockMs),
    claimIdleMs: Math.round(claimIdleMs),
    maxDeliveries,
    concurrency,
    retryBaseMs,
    retryMaxMs,
    parkKeys,
  };
}

/** The dead stream of `stream`: its topic's (also for a partition's stream), as the Rust library finds it. */
export function deadKeyOfStream(config: Pick<ConsumerConfig, "topics" | "streamPrefix">, stream: string): string {
  for (const topic of config.topics) {
    const base = keys.streamKey(config.streamPrefix, topic);
    if (!stream.startsWith(base)) continue;
    const rest = stream.slice(base.length);
    if (rest === "" || /^:\d+$/.test(rest)) return keys.deadKey(config.streamPrefix, topic);
  }
  return `${stream}:dead`;
}
