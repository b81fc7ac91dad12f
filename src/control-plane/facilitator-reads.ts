// /verify's read of the books, group-committed (db/grouped.ts): the /verify requests of this process that
// read while the previous group's statement is in flight go together in the next one
// (readClaimedOrReserved: one statement), so under load a /verify costs a share of one round trip.
import { readClaimedOrReserved } from '../books/facilitator.ts'
import { Grouped } from '../db/grouped.ts'
import type { Sql } from '../db/sql.ts'

/** At most this many reads a statement: it waits for every one of their payers' claims in flight. */
const GROUP_MAX = 64

export type ReservedRead = { proofKey: string; payer: string; block: bigint }
export type ReservedAnswer = { claimed: true } | { claimed: false; reserved: bigint }

export class FacilitatorReads {
  private readonly grouped: Grouped<ReservedRead, ReservedAnswer>

  constructor(sql: Sql) {
    this.grouped = new Grouped((reads) => readClaimedOrReserved(sql, reads), GROUP_MAX)
  }

  read(q: ReservedRead): Promise<ReservedAnswer> {
    return this.grouped.submit(q)
  }
}
