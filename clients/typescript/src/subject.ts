// The subject sent to Tollgate for a subject of the app's, as the Go client
// sends it, so that both clients count one subject in one counter.

/** The longest subject, in UTF-8 bytes, that Tollgate takes as it is. */
const maxSubjectBytes = 512;

/** Starts every subject sent as a digest. */
const digestPrefix = "sha256:";

const encoder = new TextEncoder();

/**
 * subjectOf is s itself, or, when Tollgate would refuse s or could not keep
 * it apart from others (over 512 UTF-8 bytes, not well-formed UTF-16, which
 * UTF-8 would turn into U+FFFD, or holding a control character), "sha256:"
 * and the hex SHA-256 of its UTF-8 bytes. A subject that already starts
 * with "sha256:" is sent as its digest too, so that no subject sent as it is
 * can share a counter with another's digest.
 */
export async function subjectOf(s: string): Promise<string> {
  const bytes = encoder.encode(s);
  if (bytes.length <= maxSubjectBytes && wellFormed(s) && !/\p{Cc}/u.test(s) && !s.startsWith(digestPrefix)) {
    return s;
  }
  const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return digestPrefix + Array.from(sum, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Whether s has no lone surrogate (String.prototype.isWellFormed, which
 * Node 18 lacks). */
function wellFormed(s: string): boolean {
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}
