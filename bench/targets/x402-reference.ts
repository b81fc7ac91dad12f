// Target: the published x402 reference middleware (@x402/express on Express, its facilitator in-process,
// settling on the bench's anvil) in front of the same upstream, in its own process.

import { generatePrivateKey, privateKeyToAddress } from 'viem/accounts'
import { devAccount } from '../../src/chain/dev-accounts.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { startTs } from './processes.ts'
import type { Target } from './target.ts'

/** anvil funds its first ten accounts with ETH; the last pays the reference facilitator's gas, so its
 * nonces never meet the treasury's (tollgate's settlements) or the payers'. */
const FACILITATOR_ACCOUNT = 9

export async function startX402Reference(options: {
  chain: DevChain
  upstream: string
  maxMs: number
}): Promise<Target> {
  const child = await startTs(
    'bench/targets/x402-reference-server.ts',
    {
      RPC_URL: options.chain.rpcUrl,
      CHAIN_ID: String(options.chain.chainId),
      USDC_ADDRESS: options.chain.usdcAddress,
      FACILITATOR_KEY: devAccount(FACILITATOR_ACCOUNT).privateKey,
      // An address of its own, not the treasury: every tollgate instance of the bench watches the treasury, and
      // the reference's settlements (a transfer a call) sent there were matched, recorded as unmatched inflows
      // and written by each of them, loading the machine (and PostgreSQL) while the reference was measured.
      PAY_TO: privateKeyToAddress(generatePrivateKey()),
      UPSTREAM: options.upstream,
      MAX_MS: String(options.maxMs),
    },
    /"port"/,
  )
  return {
    name: 'x402-reference',
    base: `http://127.0.0.1:${JSON.parse(child.line).port}`,
    pid: child.proc.pid ?? null,
    stop: () => child.stop(),
  }
}
