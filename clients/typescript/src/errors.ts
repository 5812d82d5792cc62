/**
 * What a handler's failure means for its entry ({@link ErrorKind}): what `throw` of any error
 * gives is a retry; {@link HandlerError} chooses another kind.
 */

/** What should become of an entry whose handler failed. */
export type ErrorKind =
  /** Deliver it again after a backoff; after `maxDeliveries` deliveries, the dead stream. */
  | "retry"
  /** The dead stream now: no delivery will ever succeed. */
  | "dead_letter"
  /** Not the entry's fault (a service it needs is away): again after a pause, this delivery not counted. */
  | "outage"
  /** A newer owner holds the entry's partition: the effect was refused; left to that owner, uncounted. */
  | "fenced";

/** A handler's failure with the kind that says what becomes of the entry. */
export class HandlerError extends Error {
  override readonly name = "HandlerError";
  constructor(
    readonly kind: ErrorKind,
    error: unknown,
  ) {
    super(messageOf(error), { cause: error });
  }
  /** Retry later (counted; dead-lettered after `maxDeliveries`). */
  static retry(error: unknown): HandlerError {
    return new HandlerError("retry", error);
  }
  /** Dead-letter now. */
  static deadLetter(error: unknown): HandlerError {
    return new HandlerError("dead_letter", error);
  }
  /** An outage: retry after a pause, this delivery not counted. */
  static outage(error: unknown): HandlerError {
    return new HandlerError("outage", error);
  }
  /** The effect was refused because a newer owner holds the entry's partition. */
  static fenced(error: unknown): HandlerError {
    return new HandlerError("fenced", error);
  }
}

/** The text of anything thrown. */
export function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === "string") return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

/** Anything thrown, as an Error (itself when it is one). */
export function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(messageOf(e));
}

/** The kind and text of anything a handler threw: a plain error is a retry. */
export function failureOf(error: unknown): { kind: ErrorKind; error: string } {
  if (error instanceof HandlerError) return { kind: error.kind, error: error.message };
  return { kind: "retry", error: messageOf(error) };
}
