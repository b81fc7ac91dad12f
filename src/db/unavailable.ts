// Tells "the database cannot be reached right now" (a restart, a failover, a lost connection: retry) from
// every other database error (a bug or bad data: 500). Used to answer 503 with Retry-After, not 500.

/** The driver's own connection codes and the socket errors it passes through. */
const CONNECTION_CODES = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  // The books writer's own deadline on a claim (src/books/batch-writer.ts): the database is stalled.
  'CLAIM_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
])

/**
 * SQLSTATE class 08 (connection exception), 57P01–57P03 (admin/crash shutdown, cannot connect now: the
 * server is starting or stopping), 53300 (too many connections), 57014 (canceled: the statement timeout
 * fired, e.g. behind a lock or on a stalled server) and 55P03 (lock not available). A canceled or timed
 * out statement rolled back: retrying it is safe.
 */
function isUnavailableSqlState(code: string): boolean {
  return (
    code.startsWith('08') ||
    code === '57P01' ||
    code === '57P02' ||
    code === '57P03' ||
    code === '53300' ||
    code === '57014' ||
    code === '55P03'
  )
}

export function isDatabaseUnavailable(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  if (typeof code !== 'string') return false
  return CONNECTION_CODES.has(code) || (/^[0-9A-Z]{5}$/.test(code) && isUnavailableSqlState(code))
}

/** Seconds a client should wait before retrying while the database is unavailable. */
export const DATABASE_RETRY_AFTER_S = 2
