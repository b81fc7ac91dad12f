// Settles the x402 authorizations of captured calls on chain, in batches, on the leader. Each settlement is
// signed locally and its hash recorded before it is sent; a restart first asks the chain about recorded
// hashes (and the authorization's nonce) before signing anything new, so none is submitted twice.
import type { Hash } from 'viem'
import { bookCallRevenue } from '../../books/ledger.ts'
import { readAuthorizationState } from '../../chain/authorization.ts'
import { broadcast, pendingNonce, quoteFees } from '../../chain/payouts.ts'
import { type StoredAuthorization, signSettlement } from '../../chain/settle.ts'
import type { Sql } from '../../db/sql.ts'
import { settlements } from '../../observability/metrics.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'

/** Gas for one transferWithAuthorization (measured ~60k on the test USDC; Circle's is similar) with margin. */
const SETTLEMENT_GAS = 150_000n

interface ToSettle {
  proof_key: string
  authorization_payload: StoredAuthorization
  settlement_tx: string | null
}

export function createSettlementJobs(deps: JobDeps): BackgroundModule {
  return {
    jobs: [
      {
        name: 'x402-settlement',
        intervalMs: deps.config.settlement.interval_ms,
        usesTreasury: true,
        run: () => settleAuthorizations(deps),
      },
    ],
  }
}

export async function settleAuthorizations({ sql, chain, config, logger }: JobDeps): Promise<number> {
  const account = chain.walletClient.account
  // 1. Settlements already sent: final, lost, or still on their way.
  const sent = await sql<ToSettle[]>`
    SELECT proof_key, authorization_payload, settlement_tx FROM claims
    WHERE kind = 'eip3009' AND settlement_tx IS NOT NULL AND settled_at IS NULL AND settlement_error IS NULL`
  for (const c of sent) {
    const receipt = await chain.publicClient
      .getTransactionReceipt({ hash: c.settlement_tx as Hash })
      .catch(() => null)
    if (receipt) {
      await markOutcome(sql, c.proof_key, receipt.status === 'success' ? null : 'reverted')
      continue
    }
    const used = await readAuthorizationState(chain.publicClient, {
      usdc: chain.usdc.address,
      authorizer: c.authorization_payload.from,
      nonce: c.authorization_payload.nonce,
    })
    // Used by another transaction (the payer may submit it themselves): the money arrived all the same.
    if (used) await markOutcome(sql, c.proof_key, null)
    // Never mined and still unused: forget the hash, sign again below.
    else await sql`UPDATE claims SET settlement_tx = NULL WHERE proof_key = ${c.proof_key}`
  }

  // 2. New ones, consecutive treasury nonces, each hash recorded before its broadcast.
  const due = await sql<ToSettle[]>`
    SELECT proof_key, authorization_payload, settlement_tx FROM claims
    WHERE kind = 'eip3009' AND status = 'captured' AND settlement_tx IS NULL AND settlement_error IS NULL
    ORDER BY captured_at LIMIT ${config.settlement.batch_max}`
  if (due.length === 0) return 0
  const fees = await quoteFees(chain.publicClient)
  let nonce = await pendingNonce(chain.publicClient, account.address)
  const nowS = BigInt(Math.floor(Date.now() / 1000))
  const inFlight: Array<{ proofKey: string; hash: Hash }> = []
  for (const c of due) {
    const a = c.authorization_payload
    if (BigInt(a.validBefore) <= nowS) {
      // Served but can no longer be collected: the service bears it (recorded, counted, logged).
      await markOutcome(sql, c.proof_key, 'expired')
      logger.warn('x402 authorization expired before settlement', { proof_key: c.proof_key })
      continue
    }
    const signed = await signSettlement(account, {
      chainId: chain.chainId,
      usdc: chain.usdc.address,
      authorization: a,
      nonce,
      gas: SETTLEMENT_GAS,
      fees,
    })
    await sql`UPDATE claims SET settlement_tx = ${signed.hash} WHERE proof_key = ${c.proof_key}`
    const sentOk = await broadcast(chain.publicClient, signed.rawTx)
    if (!sentOk.ok && sentOk.reason !== 'already_known') {
      logger.warn('x402 settlement not sent; will retry', { proof_key: c.proof_key, reason: sentOk.reason })
      await sql`UPDATE claims SET settlement_tx = NULL WHERE proof_key = ${c.proof_key}`
      break
    }
    nonce++
    inFlight.push({ proofKey: c.proof_key, hash: signed.hash })
  }

  // 3. Wait for them together.
  await Promise.all(
    inFlight.map(async ({ proofKey, hash }) => {
      try {
        const receipt = await chain.publicClient.waitForTransactionReceipt({
          hash,
          confirmations: config.chain.confirmations,
          timeout: config.settlement.confirm_timeout_ms,
        })
        await markOutcome(sql, proofKey, receipt.status === 'success' ? null : 'reverted')
      } catch {
        // Not mined in time: the next run looks it up (step 1).
      }
    }),
  )
  return inFlight.length
}

async function markOutcome(sql: Sql, proofKey: string, error: 'reverted' | 'expired' | null): Promise<void> {
  if (error) {
    await sql`UPDATE claims SET settlement_error = ${error} WHERE proof_key = ${proofKey}`
    settlements.labels(error).inc()
  } else {
    // Settled: only now is the x402 call owner revenue (DESIGN §7b). Interim until the settlement room's
    // settleAuthorization does both in one transaction.
    await sql.begin(async (tx) => {
      await tx`UPDATE claims SET settled_at = now() WHERE proof_key = ${proofKey}`
      await bookCallRevenue(tx, { proofKeys: [proofKey] })
    })
    settlements.labels('settled').inc()
  }
}
