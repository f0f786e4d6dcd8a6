package dev.overlap.nio;

import java.io.IOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.FileSystemException;
import java.nio.file.NoSuchFileException;

/** errno to exceptions, as the JDK's UnixException does. */
final class Errors {
    private Errors() {}

    static IOException io(int errno, String what) {
        return new IOException(Native.strerror(errno) + " (" + what + ", errno " + errno + ")");
    }

    static IOException forPath(int errno, String file, String detail) {
        return switch (errno) {
            case Native.EACCES -> new AccessDeniedException(file);
            case Native.ENOENT -> new NoSuchFileException(file);
            case Native.EEXIST -> new FileAlreadyExistsException(file);
            case Native.ELOOP -> new FileSystemException(file, null,
                    Native.strerror(errno) + " or unable to access attributes of symbolic link" + detail);
            default -> new FileSystemException(file, null, Native.strerror(errno) + detail);
        };
    }
}
