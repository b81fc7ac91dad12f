// The chain subsystem's start(deps): connect (or start the dev chain), a readiness check on the RPC.
import type { Config } from '../config/schema.ts'
import type { Started } from '../subsystem.ts'
import { type ChainContext, type ConnectOptions, connectChain } from './connect.ts'

export interface Chain extends Started {
  chain: ChainContext
}

export async function startChain(deps: { config: Config } & ConnectOptions): Promise<Chain> {
  const { config, ...options } = deps
  const chain = await connectChain(config, options)
  return {
    chain,
    stop: () => chain.close(),
    readiness: [
      {
        name: 'chain',
        check: async () => {
          const block = await chain.publicClient.getBlockNumber({ cacheTime: 0 })
          return { ok: true, detail: `block ${block}` }
        },
      },
    ],
  }
}
