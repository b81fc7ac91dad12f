// Binds a database to the chain it was made on (chain id, USDC contract, genesis block hash) on first start,
// and refuses a different chain on every later start: claims and payouts recorded against one chain would
// be wrong on another, and a fresh dev chain reproduces transaction hashes the books have already seen.
import type { Sql } from './sql.ts'

export interface ChainIdentity {
  chainId: number
  usdcAddress: string
  genesisHash: string
}

export class ChainMismatchError extends Error {
  readonly code = 'TOLLGATE_CHAIN_MISMATCH'
}

export async function bindDatabaseToChain(sql: Sql, chain: ChainIdentity): Promise<void> {
  const usdc = chain.usdcAddress.toLowerCase()
  const genesis = chain.genesisHash.toLowerCase()
  // First start: the row is written; later starts (and concurrent instances) find it.
  await sql`
    INSERT INTO chain_binding (chain_id, usdc_address, genesis_hash)
    VALUES (${chain.chainId}, ${usdc}, ${genesis})
    ON CONFLICT (singleton) DO NOTHING`
  const [bound] = await sql<{ chain_id: number; usdc_address: string; genesis_hash: string }[]>`
    SELECT chain_id, usdc_address, genesis_hash FROM chain_binding`
  if (!bound) return
  if (bound.chain_id === chain.chainId && bound.usdc_address === usdc && bound.genesis_hash === genesis)
    return
  throw new ChainMismatchError(
    `this database was made on chain ${bound.chain_id} (genesis ${bound.genesis_hash}, USDC ${bound.usdc_address}) ` +
      `but the chain now is ${chain.chainId} (genesis ${genesis}, USDC ${usdc}). Its proofs and payouts would be ` +
      'wrong here. On NETWORK=local the dev chain state file (local_chain.state_file) was lost or changed: restore ' +
      'it, or remove the data directory (.data/) to start over; otherwise point DATABASE_URL or RPC_URL at the ' +
      'matching pair.',
  )
}
