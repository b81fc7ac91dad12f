// What the control plane is given by main.ts. Plain values, so it is easy to build in tests.

import type { Address } from 'viem'
import type { PaymentCreator } from '../books/payment-creations.ts'
import type { AuthorizationChainChecker } from '../chain/check-authorization.ts'
import type { ChainInfo } from '../chain/info.ts'
import type { UptoChainChecker } from '../chain/upto-permit.ts'
import type { SmartWalletVerifier, WalletDigestVerifier } from '../chain/verify-smart-wallet.ts'
import type { Config } from '../config/schema.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import type { FacilitatorSettler } from './facilitator-settler.ts'
import type { FacilitatorWaits } from './facilitator-waits.ts'
import type { KeyCache } from './key-cache.ts'

export interface ControlPlaneDeps {
  config: Config
  sql: Sql
  chain: ChainInfo
  logger: Logger
  /** Base of payment_url / metered_url, e.g. https://pay.example.com */
  publicUrl(): string
  /**
   * Tells this instance's caches and, under a supervisor, its sibling workers' (resolves once they dropped
   * it); the database NOTIFY tells other instances.
   */
  onEndpointChanged(id: string): Promise<void> | undefined
  /** API keys recently found valid (key-cache.ts says how stale one may be). */
  keys: KeyCache
  /** Payment creations sharing a commit (books/payment-creations.ts). */
  paymentCreator: PaymentCreator
  /** Nonce and balance reads of an x402 authorization (/api/v1/facilitator); absent: the facilitator answers 503. */
  checkAuthorization?: AuthorizationChainChecker
  /**
   * An `exact` payer's own check of a signature ecrecover does not give it: a smart wallet (ERC-1271, or an
   * ERC-6492 wrapper of a deployed one) asked through an eth_call. Absent: EOA payers only.
   */
  verifySmartWallet?: SmartWalletVerifier
  /** The same for an `upto` permit's Permit2 digest. Absent: EOA payers only. */
  verifyWalletDigest?: WalletDigestVerifier
  /**
   * x402 upto at the facilitator: the account payers name in their permit's witness (read once; null: upto
   * is not offered on this chain) and the permit's nonce, balance and allowance reads. Absent: no upto.
   */
  upto?: { facilitator(): Promise<Address | null>; check: UptoChainChecker }
  /**
   * /settle's group commit in this process (null: none, the leader's batch sends) and the shared wait for
   * outcomes (absent: the route makes one per database).
   */
  facilitator?: FacilitatorDeps
}

export interface FacilitatorDeps {
  settler: FacilitatorSettler | null
  waits: FacilitatorWaits
}
