// A signed message checked by the wallet that claims it, on chain: an ERC-1271 contract wallet asked through
// isValidSignature, an ERC-6492 signature of a wallet not deployed yet through viem's universal validator (a
// deployless eth_call that deploys it in the call's own state), an EOA by recovery. Bounded in time: a node
// that does not answer makes the check fail with a ChainReadTimeout, never hang a request; a node that
// answers the call with an error (down, 5xx) makes it fail with ChainUnavailable, never a "no".
import { BaseError, type Client, ExecutionRevertedError, type Hex } from 'viem'
import { call, verifyMessage } from 'viem/actions'

export class ChainReadTimeout extends Error {
  readonly code = 'TOLLGATE_CHAIN_READ_TIMEOUT'
  constructor(ms: number) {
    super(`the chain did not answer within ${ms} ms`)
  }
}

export class ChainUnavailable extends Error {
  readonly code = 'TOLLGATE_CHAIN_UNAVAILABLE'
  constructor(cause: unknown) {
    super('the chain could not be asked', { cause })
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
  const read = verifyMessage(client, { address: q.address, message: q.message, signature: q.signature }).then(
    async (ok) => {
      if (!ok) await nodeAnswersCalls(client, q.address)
      return ok
    },
  )
  return Promise.race([read, late]).finally(() => clearTimeout(timer))
}

/**
 * viem's verifyMessage answers false for a failed eth_call as for a wallet's no. So a no is believed only
 * if the node answers an eth_call to the wallet now: any answer, a revert included (a contract without a
 * fallback), is the node answering; a transport or server error is not (ChainUnavailable is thrown).
 */
async function nodeAnswersCalls(client: Client, address: Hex): Promise<void> {
  try {
    await call(client, { to: address, data: '0x' })
  } catch (err) {
    if (err instanceof BaseError && err.walk((e) => e instanceof ExecutionRevertedError) !== null) return
    throw new ChainUnavailable(err)
  }
}
