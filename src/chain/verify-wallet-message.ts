// A signed message checked by the wallet that claims it, on chain: an ERC-1271 contract wallet asked through
// isValidSignature, an ERC-6492 signature of a wallet not deployed yet through viem's universal validator (a
// deployless eth_call that deploys it in the call's own state), an EOA by recovery. One chain read, bounded
// in time: a node that does not answer makes the check fail with a ChainReadTimeout, never hang a request.
import type { Client, Hex } from 'viem'
import { verifyMessage } from 'viem/actions'

export class ChainReadTimeout extends Error {
  readonly code = 'TOLLGATE_CHAIN_READ_TIMEOUT'
  constructor(ms: number) {
    super(`the chain did not answer within ${ms} ms`)
  }
}

export function verifyWalletMessage(
  client: Client,
  q: { address: Hex; message: string; signature: Hex; timeoutMs: number },
): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ChainReadTimeout(q.timeoutMs)), q.timeoutMs)
  })
  const read = verifyMessage(client, { address: q.address, message: q.message, signature: q.signature })
  return Promise.race([read, late]).finally(() => clearTimeout(timer))
}
