// Payment creations that share a commit. A creation alone is one statement of two inserts, and most of its
// PostgreSQL CPU is its commit's WAL flush, paid whatever the statement's size (~100 µs of ~440 on the bench's
// machine). Creations requested while a statement is being written wait and go together in the next one
// (createPaymentsTogether): one statement, one flush, for all of them, as the hot path's captures do.
//
// A creation whose look found no free figure, or lost it, goes again with its next look, as createPayment's
// loop does. A statement that fails for the database being away fails its creations (the API answers 503);
// one that fails otherwise is tried again one creation at a time, so a creation the database refuses fails
// alone and never the others of its statement.
import type { Sql } from '../db/sql.ts'
import { isDatabaseUnavailable } from '../db/unavailable.ts'
import {
  type CreateOutcome,
  createPayment,
  createPaymentsTogether,
  FIGURE_LOOKS,
  type NewPayment,
} from './payments.ts'

interface Waiting {
  payment: NewPayment
  look: number
  resolve(outcome: CreateOutcome): void
  reject(err: unknown): void
}

export interface PaymentCreatorOptions {
  /** Creations in one statement, at most. */
  batchMax: number
  /** Statements in flight at once; 1 shares commits best. */
  concurrency: number
}

export class PaymentCreator {
  private queue: Waiting[] = []
  private inFlight = 0
  /** Statements written, and those of them that failed (tests and benches read them). */
  statements = 0
  failedStatements = 0

  constructor(
    private readonly sql: Sql,
    private readonly options: PaymentCreatorOptions,
  ) {}

  create(payment: NewPayment): Promise<CreateOutcome> {
    return new Promise((resolve, reject) => {
      this.queue.push({ payment, look: 0, resolve, reject })
      this.pump()
    })
  }

  private pump(): void {
    while (this.inFlight < this.options.concurrency && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.options.batchMax)
      this.inFlight++
      this.statements++
      this.write(batch).finally(() => {
        this.inFlight--
        this.pump()
      })
    }
  }

  private async write(batch: Waiting[]): Promise<void> {
    let created: Awaited<ReturnType<typeof createPaymentsTogether>>
    try {
      created = await createPaymentsTogether(this.sql, batch)
    } catch (err) {
      this.failedStatements++
      // Even a statement of one: what its JSON could not carry (a lone surrogate) goes as a parameter alone.
      if (isDatabaseUnavailable(err)) {
        for (const w of batch) w.reject(err)
        return
      }
      await Promise.all(batch.map((w) => this.alone(w)))
      return
    }
    const byId = new Map(created.map((row) => [row.id, row]))
    for (const w of batch) {
      const row = byId.get(w.payment.id)
      if (row) w.resolve({ kind: 'created', payment: row })
      else if (++w.look >= FIGURE_LOOKS) w.resolve({ kind: 'figures_exhausted' })
      else this.queue.push(w)
    }
  }

  /** One creation on its own (its statement's others are not held back by it). */
  private async alone(w: Waiting): Promise<void> {
    try {
      w.resolve(await createPayment(this.sql, w.payment))
    } catch (err) {
      w.reject(err)
    }
  }
}
