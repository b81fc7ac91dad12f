// The one `postgres` client of a process. int8 columns come back as bigint (money is BIGINT base units).
//
// Transactions and reserved connections run on sessions of their own (one-connection clients), never on
// the driver's `begin`/`reserve`: in postgres 3.4.9 a query issued on a reserved or transaction connection
// after its socket closed (a database restart: the driver's own ROLLBACK after the failed statement is
// enough) schedules a write on a null socket, and `nextWrite` throws from a setImmediate callback, an
// uncaught TypeError that kills the process (porsager/postgres#1208, #1154, #1066; unreleased fixes
// #1168, #1209). Pooled queries do not take that path: the pool reconnects a closed connection before it
// writes. A session that loses its connection is marked broken at once (the driver's `onclose`) and
// refuses every later query with SessionClosedError, so nothing is written on a dead socket and nothing
// meant for a transaction can run on a new session outside it.
//
// The pool's own reconnect carried an error across it (porsager/postgres#1223): patches/postgres+3.4.9.patch
// ends a query in flight when its socket closes, so the next connection's first query is not handed it.
import postgres from 'postgres'
import { targetSessionAttrs } from './target-session.ts'

export type Sql = postgres.Sql<{ bigint: bigint }>
export type Tx = postgres.TransactionSql<{ bigint: bigint }>

export interface SqlOptions {
  /** Connections in the pool. The embedded database multiplexes one session, so it must be 1 there. */
  max: number
  /** Extra connection settings such as application_name. */
  applicationName?: string
  /**
   * 'off' for writes that may be lost in a database crash without harm (captures: a lost capture is
   * refunded, never double-charged). Claims must keep the default: a lost claim could pay twice.
   */
  synchronousCommit?: 'on' | 'off'
  /**
   * Sessions (transactions, reserved connections) open at once, each on its own connection. Default:
   * `max` when max > 1; 0 keeps the driver's begin/reserve on the pool (the embedded database is one
   * session in this process: no restart to survive, and a second connection would not be a session).
   */
  sessions?: number
  /**
   * Server-side `statement_timeout` of every connection (0 = none): a statement stuck behind a lock or a
   * stalled server fails (SQLSTATE 57014) instead of holding the one books writer and every paid call
   * queued behind it. Not for the embedded database (one session: nothing else can hold a lock).
   */
  statementTimeoutMs?: number
  /** How long opening a connection may take (TCP, startup, auth) before it fails. Default 10 s. */
  connectTimeoutMs?: number
  /**
   * Plans of this pool reach rows by their keys only: sequential and bitmap scans off (a last resort the
   * planner still takes where no index serves). For a pool whose every statement is a handful of rows
   * found by key, whose prepared plans must not depend on what the statistics said when they were made.
   */
  keyedPlans?: boolean
}

/**
 * The pause before a connection is opened again after a failed attempt, in seconds: the driver's own curve
 * ((0.5–1) × 3^retries / 100, where `retries` counts failed connects of the whole pool) capped at
 * RECONNECT_MAX_S instead of 20 s. Uncapped, a few failed connects while the server restarts grow it to
 * 7–20 s, and every query waits that long after the server is back (no answer, no 503). A query issued
 * while the server is away fails after at most this pause plus one refused connect, so the caller answers
 * 503 at once; once it is back, the next connect within this pause succeeds.
 */
export const RECONNECT_MAX_S = 0.25
export function reconnectBackoffS(retries: number, random: number = Math.random()): number {
  return (0.5 + random / 2) * Math.min(3 ** retries / 100, RECONNECT_MAX_S)
}

/** A transaction or reserved connection whose database connection closed: it is gone, retry afresh. */
export class SessionClosedError extends Error {
  readonly code = 'CONNECTION_CLOSED'
  constructor() {
    super('the database session closed (connection lost); its transaction did not commit')
    this.name = 'SessionClosedError'
  }
}

/**
 * Every statement of this service reads a handful of rows by index, or the rows since a mark: no JIT
 * compilation and no parallel workers. Both start once a plan's estimate crosses a threshold
 * (jit_above_cost, parallel_setup_cost), which grown tables reach while the work itself stays small, and
 * then cost more than the work: at 10 M history rows, reconcile's claims check (2,000 claims since its
 * checkpoint) took 600 ms, of which 167 ms compiling 261 functions and ~300 ms starting two workers on a
 * busy machine; 110 ms with neither. The driver's type lookup at connect was compiled too (10–20 ms).
 * Startup parameters: no round trip.
 */
const ROW_AT_A_TIME = { jit: 'off', max_parallel_workers_per_gather: '0' } as const

/** Idle sessions are closed after this long; busy ones never time out (a leader holds its lock). */
const SESSION_IDLE_MS = 30_000

export function createSql(url: string, options: SqlOptions): Sql {
  const settings = {
    types: { bigint: postgres.BigInt },
    // Notices (e.g. "relation already exists, skipping") are not errors and would only be noise.
    onnotice: () => {},
    idle_timeout: 0,
    ...targetSessionAttrs(url),
    connect_timeout: (options.connectTimeoutMs ?? 10_000) / 1000,
    backoff: (retries: number) => reconnectBackoffS(retries),
    connection: {
      application_name: options.applicationName ?? 'tollgate',
      ...ROW_AT_A_TIME,
      ...(options.synchronousCommit ? { synchronous_commit: options.synchronousCommit } : {}),
      ...(options.statementTimeoutMs ? { statement_timeout: options.statementTimeoutMs } : {}),
      ...(options.keyedPlans ? { enable_seqscan: 'off', enable_bitmapscan: 'off' } : {}),
    },
  }
  const pool = postgres(url, { ...settings, max: options.max }) as unknown as Sql
  const sessionMax = options.sessions ?? (options.max > 1 ? options.max : 0)
  if (sessionMax === 0) return pool

  const sessions = new Sessions(
    (onClose) =>
      postgres(url, {
        ...settings,
        max: 1,
        // A session lives as long as its holder: a lifetime or idle close would drop a held lock.
        max_lifetime: null,
        onclose: onClose,
      }) as unknown as Sql,
    sessionMax,
  )
  const endPool = pool.end.bind(pool)
  // Same names and call shapes as the driver's, so every caller keeps `sql.begin(async (tx) => …)`.
  Object.assign(pool, {
    begin: (a: string | ((tx: Tx) => unknown), b?: (tx: Tx) => unknown) =>
      typeof a === 'function' ? sessions.transaction('', a) : sessions.transaction(a, b!),
    reserve: () => sessions.reserve(),
    end: async (opts?: { timeout?: number }) => {
      await Promise.all([endPool(opts), sessions.end(opts)])
    },
  })
  return pool
}

class Session {
  broken: SessionClosedError | null = null
  idleTimer: NodeJS.Timeout | null = null
  readonly client: Sql
  /** The client as callers see it: every query refused once the connection is gone. */
  readonly handle: Sql

  constructor(create: (onClose: () => void) => Sql, onBroken: (s: Session) => void) {
    this.client = create(() => {
      if (this.broken) return
      this.broken = new SessionClosedError()
      onBroken(this)
    })
    // A refused query is a rejected promise, as the driver's own would be: `q.catch(…)` still catches it.
    const refused = () => Promise.reject(this.broken)
    this.handle = new Proxy(this.client, {
      apply: (target, thisArg, args) => {
        // Only a tagged template is a query; sql(rows), sql('name') build fragments and send nothing.
        const isQuery = Array.isArray(args[0]) && 'raw' in (args[0] as object)
        if (isQuery && this.broken) return refused()
        return Reflect.apply(target, thisArg, args)
      },
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver)
        if (prop === 'unsafe' || prop === 'file')
          return (...args: unknown[]) =>
            this.broken ? refused() : (value as (...a: unknown[]) => unknown).apply(target, args)
        if (prop === 'begin' || prop === 'reserve' || prop === 'savepoint')
          return () => {
            throw new Error(`${String(prop)} is not available inside a session`)
          }
        return value
      },
      // A session is a transaction or a reservation already: code that asks ('savepoint' in sql) whether it
      // runs inside one is told yes, and that it cannot begin another.
      has: (target, prop) =>
        prop === 'savepoint'
          ? true
          : prop === 'begin' || prop === 'reserve'
            ? false
            : Reflect.has(target, prop),
    })
  }
}

class Sessions {
  private readonly all = new Set<Session>()
  private idle: Session[] = []
  private waiting: Array<(s: Session) => void> = []
  private ended = false

  constructor(
    private readonly create: (onClose: () => void) => Sql,
    private readonly max: number,
  ) {}

  async transaction(mode: string, fn: (tx: Tx) => unknown): Promise<unknown> {
    const session = await this.acquire()
    const tx = session.handle as unknown as Tx
    try {
      await tx.unsafe(`BEGIN ${mode.replace(/[^a-z ]/gi, '')}`)
      try {
        const x = fn(tx)
        const result = await (Array.isArray(x) ? Promise.all(x) : x)
        await tx.unsafe('COMMIT')
        return result
      } catch (err) {
        // A broken session has no transaction left to roll back: the server ended it with the connection.
        if (!session.broken) await tx.unsafe('ROLLBACK').catch(() => {})
        throw err
      }
    } finally {
      this.release(session)
    }
  }

  async reserve(): Promise<postgres.ReservedSql<{ bigint: bigint }>> {
    const session = await this.acquire()
    let released = false
    const release = () => {
      if (released) return
      released = true
      this.release(session)
    }
    return new Proxy(session.handle, {
      get: (target, prop, receiver) => (prop === 'release' ? release : Reflect.get(target, prop, receiver)),
    }) as unknown as postgres.ReservedSql<{ bigint: bigint }>
  }

  async end(opts?: { timeout?: number }): Promise<void> {
    this.ended = true
    for (const wake of this.waiting.splice(0)) wake(this.open())
    await Promise.all([...this.all].map((s) => s.client.end(opts).catch(() => {})))
  }

  private acquire(): Promise<Session> {
    const idle = this.idle.pop()
    if (idle) {
      if (idle.idleTimer) clearTimeout(idle.idleTimer)
      return Promise.resolve(idle)
    }
    if (this.all.size < this.max || this.ended) return Promise.resolve(this.open())
    return new Promise((resolve) => this.waiting.push(resolve))
  }

  private open(): Session {
    const session: Session = new Session(this.create, (s) => this.forget(s))
    this.all.add(session)
    return session
  }

  private release(session: Session): void {
    if (session.broken || this.ended) {
      this.forget(session)
      return
    }
    const next = this.waiting.shift()
    if (next) return next(session)
    session.idleTimer = setTimeout(() => {
      this.idle = this.idle.filter((s) => s !== session)
      this.forget(session)
    }, SESSION_IDLE_MS).unref()
    this.idle.push(session)
  }

  /** Drops a session for good (broken, idle too long, or ended); a waiter gets a fresh one. */
  private forget(session: Session): void {
    if (!this.all.delete(session)) return
    if (session.idleTimer) clearTimeout(session.idleTimer)
    this.idle = this.idle.filter((s) => s !== session)
    session.client.end({ timeout: 0 }).catch(() => {})
    const next = this.waiting.shift()
    if (next) next(this.open())
  }
}
