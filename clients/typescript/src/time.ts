/**
 * RFC 3339 times as the relay writes them (`2026-12-02T13:57:01.123456Z`) and as the Rust
 * library reads them (chrono's `parse_from_rfc3339`): a `Date` keeps milliseconds only, so
 * the normalized text (UTC, microseconds, `Z`) is kept beside it.
 */

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** A parsed time: the instant (milliseconds), and its text in UTC with microseconds. */
export interface Rfc3339 {
  date: Date;
  /** `YYYY-MM-DDTHH:MM:SS.ffffffZ`, in UTC. */
  text: string;
}

function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/** Parses RFC 3339 text; `null` when it is not. */
export function parseRfc3339(text: string): Rfc3339 | null {
  const m = RFC3339.exec(text);
  if (!m) return null;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number, number, number, number, number, number,
  ];
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return null;
  if (hour > 23 || minute > 59 || second > 59) return null;
  let offsetMinutes = 0;
  if (m[8] === undefined) {
    const oh = Number(m[10]);
    const om = Number(m[11]);
    if (oh > 23 || om > 59) return null;
    offsetMinutes = (m[9] === "-" ? -1 : 1) * (oh * 60 + om);
  }
  const fraction = (m[7] ?? "").padEnd(9, "0").slice(0, 9);
  const micros = Number(fraction.slice(0, 6));
  const base = Date.UTC(year, month - 1, day, hour, minute, second);
  const d = new Date(base);
  d.setUTCFullYear(year); // Date.UTC maps years 0..99 to 1900..1999
  const utcSeconds = d.getTime() - offsetMinutes * 60_000;
  const date = new Date(utcSeconds + Math.floor(micros / 1000));
  return { date, text: formatMicros(utcSeconds, micros) };
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, "0");
}

/** `YYYY-MM-DDTHH:MM:SS.ffffffZ` for a whole-second instant (ms since the epoch) and microseconds. */
export function formatMicros(wholeSecondMs: number, micros: number): string {
  const d = new Date(wholeSecondMs);
  return (
    `${pad(d.getUTCFullYear(), 4)}-${pad(d.getUTCMonth() + 1, 2)}-${pad(d.getUTCDate(), 2)}` +
    `T${pad(d.getUTCHours(), 2)}:${pad(d.getUTCMinutes(), 2)}:${pad(d.getUTCSeconds(), 2)}` +
    `.${pad(micros, 6)}Z`
  );
}
