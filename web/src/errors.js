// The one error type of the runtime: what went wrong (`kind`) and where (`place`: a kernel
// with its op and model path, a buffer, an input, a file), so a failure is never silent and
// never anonymous.

export class ProgramError extends Error {
  /**
   * @param {'format'|'input'|'limit'|'shader'|'kernel'|'device'} kind
   * @param {string} message
   * @param {string} [place]
   */
  constructor(kind, message, place) {
    super(place ? `${place}: ${message}` : message);
    this.name = 'ProgramError';
    this.kind = kind;
    this.place = place;
  }
}
