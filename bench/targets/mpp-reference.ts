// Target: MPP's reference server (mppx/express, its evm charge settling each call on the bench's anvil) in
// front of the same upstream, in its own process.

import { randomBytes } from 'node:crypto'
import { generatePrivateKey, privateKeyToAddress } from 'viem/accounts'
import { devAccount } from '../../src/chain/dev-accounts.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { startTs } from './processes.ts'
import type { Target } from './target.ts'

/** anvil funds its first ten accounts with ETH; the 9th pays the x402 reference's gas, the 8th this one's. */
const SETTLER_ACCOUNT = 8

export async function startMppReference(options: {
  chain: DevChain
  upstream: string
  maxMs: number
}): Promise<Target> {
  const child = await startTs(
    'bench/targets/mpp-reference-server.ts',
    {
      RPC_URL: options.chain.rpcUrl,
      CHAIN_ID: String(options.chain.chainId),
      USDC_ADDRESS: options.chain.usdcAddress,
      SETTLER_KEY: devAccount(SETTLER_ACCOUNT).privateKey,
      SECRET_KEY: randomBytes(32).toString('hex'),
      // An address of its own, not the treasury (which every tollgate instance of the bench watches).
      PAY_TO: privateKeyToAddress(generatePrivateKey()),
      UPSTREAM: options.upstream,
      MAX_MS: String(options.maxMs),
    },
    /"port"/,
  )
  return {
    name: 'mpp-reference',
    base: `http://127.0.0.1:${JSON.parse(child.line).port}`,
    pid: child.proc.pid ?? null,
    stop: () => child.stop(),
  }
}
