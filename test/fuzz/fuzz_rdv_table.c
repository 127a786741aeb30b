/*
 * fuzz_rdv_table - what a rank reads back from whoever accepted its
 * connection to the rendezvous (a squatter on the port, as like as the
 * rendezvous): the handshake's challenge (rcc_bootstrap_challenge_parse:
 * magic, purpose, nonce, proof), then (rcc_bootstrap_reply_check, then
 * rcc_bootstrap_table_decode) the reply (magic, status, nranks, session
 * nonce) and on success one address per rank. The table holds where every
 * rank listens, so a bad entry must be refused, not connected to.
 *
 * Input: two bytes that choose this rank's nranks (1..256) and rank, the
 * 56-byte challenge, the 28-byte reply, then the table (any length), or
 * after a refusal its reason (up to RCC_BOOT_REFUSAL_BYTES).
 */
#include "error.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t pick[2];
  fuzz_take(&data, &size, pick, sizeof(pick));
  int nranks = 1 + pick[0];
  int rank = pick[1] % nranks;
  char err[RCC_ERRLEN];

  size_t clen = size < RCC_BOOT_CHALLENGE_BYTES ? size
                                                : RCC_BOOT_CHALLENGE_BYTES;
  uint8_t *chal = malloc(clen ? clen : 1); /* exact size */
  memcpy(chal, data, clen);
  data += clen;
  size -= clen;
  uint8_t nonce[RCC_BOOT_NONCE_BYTES], proof[RCC_BOOT_PROOF_BYTES];
  if (rcc_bootstrap_challenge_parse(chal, clen, 1, nonce, proof) == 0) {
    FUZZ_CHECK(clen == RCC_BOOT_CHALLENGE_BYTES);
    FUZZ_CHECK(rcc_get_be32(chal) == 0x52434342u);
    FUZZ_CHECK(rcc_get_be16(chal + 4) == 1 && rcc_get_be16(chal + 6) == 0);
    FUZZ_CHECK(memcmp(nonce, chal + 8, sizeof(nonce)) == 0);
    FUZZ_CHECK(memcmp(proof, chal + 24, sizeof(proof)) == 0);
  }
  free(chal);

  size_t rlen = size < RCC_BOOT_REPLY_BYTES ? size : RCC_BOOT_REPLY_BYTES;
  uint8_t *reply = malloc(rlen ? rlen : 1);
  memcpy(reply, data, rlen);
  data += rlen;
  size -= rlen;
  memset(err, 'x', sizeof(err));
  ringcc_result_t r = rcc_bootstrap_reply_check(reply, rlen, rank, nranks,
                                                "192.0.2.1:29500", err,
                                                sizeof(err));
  if (r != RINGCC_SUCCESS) {
    FUZZ_CHECK(r == RINGCC_ERR_NETWORK || r == RINGCC_ERR_INVALID_ARGUMENT);
    fuzz_check_message(err, sizeof(err));
    if (r == RINGCC_ERR_INVALID_ARGUMENT) {
      /* A refusal: with its reason after it (the rest of the input). */
      size_t tlen = size < RCC_BOOT_REFUSAL_BYTES ? size
                                                  : RCC_BOOT_REFUSAL_BYTES;
      uint8_t *all = malloc(rlen + tlen); /* exact size */
      memcpy(all, reply, rlen);
      memcpy(all + rlen, data, tlen);
      memset(err, 'x', sizeof(err));
      FUZZ_CHECK(rcc_bootstrap_reply_check(all, rlen + tlen, rank, nranks,
                                           "192.0.2.1:29500", err,
                                           sizeof(err)) ==
                 RINGCC_ERR_INVALID_ARGUMENT);
      fuzz_check_message(err, sizeof(err));
      free(all);
    }
    free(reply);
    return 0;
  }
  FUZZ_CHECK(rlen == RCC_BOOT_REPLY_BYTES);
  FUZZ_CHECK(rcc_get_be32(reply) == 0x52434354u && rcc_get_be32(reply + 4) == 0);
  FUZZ_CHECK(rcc_get_be32(reply + 8) == (uint32_t)nranks);
  free(reply);

  uint8_t *table = malloc(size ? size : 1); /* exact size */
  memcpy(table, data, size);
  struct sockaddr_storage *peers = calloc((size_t)nranks, sizeof(*peers));
  memset(err, 'x', sizeof(err));
  r = rcc_bootstrap_table_decode(table, size, nranks, peers, err, sizeof(err));
  if (r != RINGCC_SUCCESS) {
    FUZZ_CHECK(r == RINGCC_ERR_NETWORK);
    fuzz_check_message(err, sizeof(err));
  } else {
    FUZZ_CHECK(size >= (size_t)RCC_BOOT_ADDR_BYTES * nranks);
    for (int i = 0; i < nranks; i++) {
      if (nranks > 1)
        fuzz_check_boot_addr(&peers[i], table + RCC_BOOT_ADDR_BYTES * i);
      else /* one rank: no ring, the entry is not read */
        FUZZ_CHECK(peers[i].ss_family == 0);
    }
  }
  free(peers);
  free(table);
  return 0;
}
