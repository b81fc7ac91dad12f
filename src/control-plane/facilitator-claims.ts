// The facilitator's claims, group-committed (db/grouped.ts): the /settle requests of this process that claim
// while the previous group's transaction is in flight go together in the next one (claimFacilitatorPayments:
// one transaction of two statements), so under load a claim costs a share of one commit instead of a
// transaction of its own.
import {
  claimFacilitatorPayments,
  type FacilitatorClaim,
  type FacilitatorClaimRequest,
} from '../books/facilitator.ts'
import { Grouped } from '../db/grouped.ts'
import type { Sql } from '../db/sql.ts'

/** At most this many claims a transaction: the payers' locks are held until its commit. */
const GROUP_MAX = 64

export class FacilitatorClaims {
  private readonly grouped: Grouped<FacilitatorClaimRequest, FacilitatorClaim>

  constructor(sql: Sql) {
    this.grouped = new Grouped((requests) => claimFacilitatorPayments(sql, requests), GROUP_MAX)
  }

  claim(request: FacilitatorClaimRequest): Promise<FacilitatorClaim> {
    return this.grouped.submit(request)
  }
}
