/** Delays as the Rust library computes them (`outbox_core::backoff`). */

/** `base * 2^(attempts-1)`, capped at `max` (milliseconds). */
export function nominalDelay(attempts: number, baseMs: number, maxMs: number): number {
  const exponent = Math.min(Math.max(attempts - 1, 0), 62);
  return Math.min(baseMs * 2 ** exponent, maxMs);
}

/** The nominal delay shortened by up to a fifth, `unit` in [0, 1]. */
export function jittered(nominalMs: number, unit: number): number {
  const u = Math.min(Math.max(unit, 0), 1);
  return nominalMs * (1 - 0.2 * u);
}

/** The wait before delivery `attempts + 1` of a failed entry. */
export function retryDelay(attempts: number, baseMs: number, maxMs: number, unit = Math.random()): number {
  return jittered(nominalDelay(attempts, baseMs, maxMs), unit);
}

/** The pause after `streak` failures in a row of an outage: 100 ms doubling to 5 s. */
export function outagePause(streak: number, unit = Math.random()): number {
  return retryDelay(Math.max(streak, 1), 100, 5000, unit);
}

/** At most one line per `everyMs`, counting the ones left out. */
export class ErrorLog {
  private last: number | null = null;
  private suppressed = 0;
  constructor(private readonly everyMs: number) {}
  /** The number left out since the last line, when this one may be logged; else `null`. */
  admit(now = Date.now()): number | null {
    if (this.last !== null && now - this.last < this.everyMs) {
      this.suppressed += 1;
      return null;
    }
    this.last = now;
    const n = this.suppressed;
    this.suppressed = 0;
    return n;
  }
  reset(): void {
    this.last = null;
    this.suppressed = 0;
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
